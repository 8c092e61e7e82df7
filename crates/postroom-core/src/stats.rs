//! In-process counters of a consumer, for reports and tests (metrics go through `metrics`).

use crate::outcome::Handled;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one consumer.
#[derive(Debug, Default)]
pub struct ConsumerStats {
    applied: AtomicU64,
    duplicates: AtomicU64,
    business_outcomes: AtomicU64,
    settle_failures: AtomicU64,
    retries_by_stage: Mutex<BTreeMap<usize, u64>>,
    parked_by_code: Mutex<BTreeMap<String, u64>>,
}

/// A copy of the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    /// Effects applied.
    pub applied: u64,
    /// Duplicates absorbed by the inbox.
    pub duplicates: u64,
    /// Business outcomes.
    pub business_outcomes: u64,
    /// Settling acts that failed (the message stayed with the broker).
    pub settle_failures: u64,
    /// Retries scheduled per ladder stage.
    pub retries_by_stage: BTreeMap<usize, u64>,
    /// Parked messages per error code.
    pub parked_by_code: BTreeMap<String, u64>,
}

impl ConsumerStats {
    pub(crate) fn record_handled(&self, h: &Handled) {
        let c = match h {
            Handled::Applied => &self.applied,
            Handled::Duplicate => &self.duplicates,
            Handled::BusinessOutcome(_) => &self.business_outcomes,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn record_retry(&self, stage: usize) {
        *self
            .retries_by_stage
            .lock()
            .expect("stats lock")
            .entry(stage)
            .or_default() += 1;
    }
    pub(crate) fn record_parked(&self, code: &str) {
        *self
            .parked_by_code
            .lock()
            .expect("stats lock")
            .entry(code.to_string())
            .or_default() += 1;
    }
    pub(crate) fn record_settle_failure(&self) {
        self.settle_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A copy of the counters now.
    #[must_use]
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            applied: self.applied.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            business_outcomes: self.business_outcomes.load(Ordering::Relaxed),
            settle_failures: self.settle_failures.load(Ordering::Relaxed),
            retries_by_stage: self.retries_by_stage.lock().expect("stats lock").clone(),
            parked_by_code: self.parked_by_code.lock().expect("stats lock").clone(),
        }
    }
}
