//! Counters of one broker link, for tests and reports (metrics go through `metrics`, with the
//! names in `postroom_core::metrics`).

use postroom_core::metrics as m;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `transport` label value.
pub const TRANSPORT: &str = "rabbitmq";

/// Counters of one [`Broker`](crate::Broker).
#[derive(Debug, Default)]
pub struct LinkStats {
    reconnects: AtomicU64,
    channel_rebuilds: AtomicU64,
    cancellations: AtomicU64,
    unroutable: AtomicU64,
    nacked: AtomicU64,
    max_in_flight: AtomicU64,
    window_slides: AtomicU64,
    ack_acts: AtomicU64,
    acked: AtomicU64,
    acked_by_runs: AtomicU64,
    empty_group_turns: AtomicU64,
}

impl LinkStats {
    /// A new connection was made after the first one.
    pub fn record_reconnect(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(m::RECONNECTS, "transport" => TRANSPORT, "level" => "connection")
            .increment(1);
    }
    /// A consumer channel was closed and opened again.
    pub fn record_channel_rebuild(&self) {
        self.channel_rebuilds.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(m::RECONNECTS, "transport" => TRANSPORT, "level" => "channel")
            .increment(1);
    }
    /// The broker cancelled a consumer (queue deleted, node down).
    pub fn record_cancellation(&self) {
        self.cancellations.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(m::CANCELLATIONS, "transport" => TRANSPORT).increment(1);
    }
    /// A publish came back with basic.return.
    pub fn record_unroutable(&self) {
        self.unroutable.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(m::UNROUTABLE, "transport" => TRANSPORT).increment(1);
    }
    /// A publish was nacked.
    pub fn record_nack(&self) {
        self.nacked.fetch_add(1, Ordering::Relaxed);
    }

    /// A publish was sent with `in_flight` confirms of the same publisher outstanding
    /// (itself included).
    pub fn record_in_flight(&self, in_flight: usize) {
        self.max_in_flight
            .fetch_max(in_flight as u64, Ordering::Relaxed);
    }
    /// A publish was sent the moment the oldest confirm of a full window arrived, with the
    /// rest of the window still outstanding (the window slid instead of draining).
    pub fn record_window_slide(&self) {
        self.window_slides.fetch_add(1, Ordering::Relaxed);
    }

    /// One basic.ack was sent for `deliveries` deliveries (more than one: the `multiple`
    /// flag acknowledged a run).
    pub fn record_ack_act(&self, deliveries: usize) {
        self.ack_acts.fetch_add(1, Ordering::Relaxed);
        self.acked.fetch_add(deliveries as u64, Ordering::Relaxed);
        if deliveries > 1 {
            self.acked_by_runs
                .fetch_add(deliveries as u64, Ordering::Relaxed);
        }
    }

    /// A caller took a publisher's turn to send the waiting single messages and found none
    /// (another caller had taken its message into a group).
    pub fn record_empty_group_turn(&self) {
        self.empty_group_turns.fetch_add(1, Ordering::Relaxed);
    }

    /// How many turns to send single messages found none waiting.
    #[must_use]
    pub fn empty_group_turns(&self) -> u64 {
        self.empty_group_turns.load(Ordering::Relaxed)
    }

    /// The most confirms one publisher had outstanding at once.
    #[must_use]
    pub fn max_in_flight(&self) -> u64 {
        self.max_in_flight.load(Ordering::Relaxed)
    }
    /// Publishes sent into a window freed by one confirm while the rest of it was still
    /// outstanding: a batch of `n` through a window of `w` slides `n - w` times.
    #[must_use]
    pub fn window_slides(&self) -> u64 {
        self.window_slides.load(Ordering::Relaxed)
    }

    /// Connection reconnects so far.
    #[must_use]
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }
    /// Consumer channel rebuilds so far.
    #[must_use]
    pub fn channel_rebuilds(&self) -> u64 {
        self.channel_rebuilds.load(Ordering::Relaxed)
    }
    /// Consumer cancellations so far.
    #[must_use]
    pub fn cancellations(&self) -> u64 {
        self.cancellations.load(Ordering::Relaxed)
    }
    /// Returned publishes so far.
    #[must_use]
    pub fn unroutable(&self) -> u64 {
        self.unroutable.load(Ordering::Relaxed)
    }
    /// Nacked publishes so far.
    #[must_use]
    pub fn nacked(&self) -> u64 {
        self.nacked.load(Ordering::Relaxed)
    }
    /// basic.ack frames sent by subscribers so far (one per run acknowledged with `multiple`).
    #[must_use]
    pub fn ack_acts(&self) -> u64 {
        self.ack_acts.load(Ordering::Relaxed)
    }
    /// Deliveries acknowledged by subscribers so far.
    #[must_use]
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }
    /// Deliveries acknowledged as part of a run (a `multiple` ack covering more than one).
    #[must_use]
    pub fn acked_by_runs(&self) -> u64 {
        self.acked_by_runs.load(Ordering::Relaxed)
    }
}
