//! Counters of what the transport did beyond delivering: deliveries whose ownership was lost
//! (also the `postroom_ownership_lost_total` metric), visibility extensions, deletes repeated
//! after a partial failure, and received messages released unhandled.

use postroom_core::metrics as m;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters, shared by a transport's subscribers.
#[derive(Debug, Default)]
pub struct SqsStats {
    ownership_lost: AtomicU64,
    extended: AtomicU64,
    delete_retries: AtomicU64,
    released: AtomicU64,
}

impl SqsStats {
    pub(crate) fn record_ownership_lost(&self, consumer: &str) {
        self.ownership_lost.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(m::OWNERSHIP_LOST, "consumer" => consumer.to_string(), "transport" => crate::publisher::TRANSPORT)
            .increment(1);
    }
    pub(crate) fn record_extended(&self) {
        self.extended.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn record_delete_retry(&self, n: u64) {
        self.delete_retries.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn record_released(&self, n: u64) {
        self.released.fetch_add(n, Ordering::Relaxed);
    }

    /// Deliveries whose visibility ran out before they settled: another consumer may have
    /// received the message (a duplicate the inbox absorbs).
    #[must_use]
    pub fn ownership_lost(&self) -> u64 {
        self.ownership_lost.load(Ordering::Relaxed)
    }
    /// Visibility extensions made while handlers ran.
    #[must_use]
    pub fn extended(&self) -> u64 {
        self.extended.load(Ordering::Relaxed)
    }
    /// Delete entries sent again after a batch delete reported them failed.
    #[must_use]
    pub fn delete_retries(&self) -> u64 {
        self.delete_retries.load(Ordering::Relaxed)
    }
    /// Received messages made visible again without being handled (at close).
    #[must_use]
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }
}
