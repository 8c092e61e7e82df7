//! The last error a consumer recorded for a message, kept apart from the message.
//!
//! Some brokers retry without a new copy (SQS hides the same message again with
//! `ChangeMessageVisibility`) and dead-letter it by themselves (SQS `maxReceiveCount`, a quorum
//! queue's delivery limit, JetStream `MaxDeliver`): the copy that reaches the dead-letter place
//! then carries none of the consumer's diagnostics, because nobody could write them into it. A
//! transport that works this way records each failure here under `(consumer, message id)` and,
//! when it reads a dead-lettered copy back, joins the record to it (as the
//! `x-first-failure-at` and `x-last-error*` headers the parking codec reads).
//!
//! [`MemoryLastErrors`] keeps records in the process, bounded; a log in the consumer's own
//! database (which survives restarts and is shared by every consumer process) implements the
//! same trait.

use crate::envelope::MessageId;
use crate::error::{ErrorClass, Result};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// What is kept of a failure.
#[derive(Clone, Debug, PartialEq)]
pub struct LastError {
    /// When the first recorded failure of this message happened.
    pub first_failure_at: DateTime<Utc>,
    /// When this failure happened.
    pub at: DateTime<Utc>,
    /// Its class.
    pub class: ErrorClass,
    /// Its code.
    pub code: String,
    /// Its text (truncated by the caller).
    pub message: String,
}

/// Where the last error of each unsettled message is kept.
#[async_trait]
pub trait LastErrorLog: Send + Sync {
    /// Record `error` as the last error of `id` for `consumer`; the first failure time of an
    /// earlier record of the same message is kept.
    async fn record(&self, consumer: &str, id: MessageId, error: LastError) -> Result<()>;

    /// The last error recorded for `id`, if any.
    async fn get(&self, consumer: &str, id: MessageId) -> Result<Option<LastError>>;

    /// Forget `id` (it was settled, or its dead-lettered copy was stored with the record).
    async fn forget(&self, consumer: &str, id: MessageId) -> Result<()>;
}

type Key = (String, MessageId);

/// A [`LastErrorLog`] in memory, holding at most `capacity` records (the oldest go first).
/// Lost on restart: a copy dead-lettered after a restart is described without its last error.
pub struct MemoryLastErrors {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: HashMap<Key, LastError>,
    /// Keys in the order they were first recorded (forgotten keys are skipped on eviction).
    order: VecDeque<Key>,
}

impl MemoryLastErrors {
    /// A log of at most `capacity` records (at least 1).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::sync::lock_unpoisoned(&self.inner)
    }

    /// Records held now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// True when no record is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for MemoryLastErrors {
    /// 100,000 records.
    fn default() -> Self {
        Self::new(100_000)
    }
}

#[async_trait]
impl LastErrorLog for MemoryLastErrors {
    async fn record(&self, consumer: &str, id: MessageId, mut error: LastError) -> Result<()> {
        let mut inner = self.lock();
        let key = (consumer.to_string(), id);
        if let Some(old) = inner.records.get(&key) {
            error.first_failure_at = old.first_failure_at.min(error.first_failure_at);
        } else {
            inner.order.push_back(key.clone());
        }
        inner.records.insert(key, error);
        while inner.records.len() > self.capacity {
            match inner.order.pop_front() {
                Some(oldest) => {
                    inner.records.remove(&oldest);
                }
                None => break,
            }
        }
        // Keys of forgotten records pile up in `order`; drop them once they outnumber the rest.
        if inner.order.len() > 2 * self.capacity {
            let Inner { records, order } = &mut *inner;
            order.retain(|k| records.contains_key(k));
        }
        Ok(())
    }

    async fn get(&self, consumer: &str, id: MessageId) -> Result<Option<LastError>> {
        Ok(self
            .lock()
            .records
            .get(&(consumer.to_string(), id))
            .cloned())
    }

    async fn forget(&self, consumer: &str, id: MessageId) -> Result<()> {
        self.lock().records.remove(&(consumer.to_string(), id));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: &str, at: DateTime<Utc>) -> LastError {
        LastError {
            first_failure_at: at,
            at,
            class: ErrorClass::Transient,
            code: code.into(),
            message: format!("{code} happened"),
        }
    }

    #[tokio::test]
    async fn keeps_the_first_failure_and_the_last_error_and_stays_bounded() {
        let log = MemoryLastErrors::new(2);
        let (a, b, c) = (MessageId::new(), MessageId::new(), MessageId::new());
        let t0 = Utc::now() - chrono::Duration::seconds(60);
        log.record("inv", a, error("first", t0)).await.unwrap();
        log.record("inv", a, error("second", Utc::now()))
            .await
            .unwrap();
        let got = log.get("inv", a).await.unwrap().unwrap();
        assert_eq!(got.code, "second");
        assert_eq!(got.first_failure_at, t0);
        assert!(log.get("other", a).await.unwrap().is_none(), "per consumer");
        log.record("inv", b, error("b", t0)).await.unwrap();
        log.record("inv", c, error("c", t0)).await.unwrap();
        assert_eq!(log.len(), 2);
        assert!(
            log.get("inv", a).await.unwrap().is_none(),
            "the oldest went first"
        );
        log.forget("inv", b).await.unwrap();
        assert!(log.get("inv", b).await.unwrap().is_none());
        assert_eq!(log.len(), 1);
    }
}
