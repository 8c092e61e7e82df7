//! The e2e workload: which messages fail once and which are undecodable, the messages
//! themselves, and the ledger of when each was sent and applied.

use super::super::handler::Progress;
use crate::error::BenchError;
use crate::payload;
use postroom_core::{Incoming, OutgoingMessage};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What happens to a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Applied on its first delivery.
    Good,
    /// Its first delivery fails transiently; the broker brings it back after the delay.
    FailsOnce,
    /// Its body is not an envelope: parked on its first delivery, never applied.
    Undecodable,
}

/// The shares of each kind, spread evenly over the indexes (deterministic: every
/// implementation sees the same messages fail).
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// Messages in a run.
    pub n: usize,
    /// Share that fails once.
    pub fail_share: f64,
    /// Share that is undecodable.
    pub poison_share: f64,
}

/// True when `share` of the indexes `0..=i` is one more than of `0..i` (with `offset` moving
/// the picks apart from another share's).
fn picked(i: usize, share: f64, offset: f64) -> bool {
    let at = |k: usize| (k as f64 * share + offset).floor();
    at(i + 1) > at(i)
}

impl Mix {
    /// The kind of message `i`.
    #[must_use]
    pub fn kind(&self, i: usize) -> Kind {
        if picked(i, self.poison_share, 0.0) {
            Kind::Undecodable
        } else if picked(i, self.fail_share, 0.5) {
            Kind::FailsOnce
        } else {
            Kind::Good
        }
    }

    /// Messages that end up applied (all but the undecodable ones).
    #[must_use]
    pub fn applied_total(&self) -> usize {
        (0..self.n)
            .filter(|i| self.kind(*i) != Kind::Undecodable)
            .count()
    }

    /// Messages of `kind`.
    #[must_use]
    pub fn count(&self, kind: Kind) -> usize {
        (0..self.n).filter(|i| self.kind(*i) == kind).count()
    }

    /// Message `i` of `bytes` bytes (fresh ids on every call); an
    /// undecodable one carries bytes no decoder accepts.
    #[must_use]
    pub fn message(&self, i: usize, bytes: usize) -> OutgoingMessage {
        let mut m = payload::message(i, bytes);
        if self.kind(i) == Kind::Undecodable {
            let mut body = b"\xffnot an envelope ".to_vec();
            body.resize(m.body.len().max(body.len()), b'x');
            m.body = body;
        }
        m
    }

    /// All `n` messages.
    #[must_use]
    pub fn messages(&self, bytes: usize) -> Vec<OutgoingMessage> {
        (0..self.n).map(|i| self.message(i, bytes)).collect()
    }
}

/// The index a bench message carries in its data.
#[must_use]
pub fn index_of(m: &Incoming) -> Option<usize> {
    m.envelope
        .data
        .get("i")
        .and_then(serde_json::Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
}

/// When each message was sent and first applied, nanoseconds after the run's start (0: not
/// yet), and a count of applied messages to wait on.
#[derive(Debug)]
pub struct Ledger {
    epoch: Instant,
    sent: Vec<AtomicU64>,
    applied: Vec<AtomicU64>,
    /// Messages applied (each once).
    pub progress: Progress,
}

impl Ledger {
    /// A ledger for `n` messages, its clock starting now.
    #[must_use]
    pub fn new(n: usize) -> Self {
        Self {
            epoch: Instant::now(),
            sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
            applied: (0..n).map(|_| AtomicU64::new(0)).collect(),
            progress: Progress::default(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Messages `range` are being sent now.
    pub fn sent(&self, range: std::ops::Range<usize>) {
        let now = self.now();
        for i in range {
            if let Some(s) = self.sent.get(i) {
                s.store(now, Ordering::Relaxed);
            }
        }
    }

    /// Message `i` was applied (its transaction committed); only the first time counts.
    pub fn applied(&self, i: usize) {
        let now = self.now();
        if let Some(a) = self.applied.get(i)
            && a.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.progress.tick();
        }
    }

    /// Wait until `total` messages were applied; the time from the first send until they
    /// were, or, when `limit` passed first, a stall that `stalled` tells from the count
    /// applied so far.
    pub async fn wait_applied(
        &self,
        total: usize,
        limit: Duration,
        stalled: impl FnOnce(usize) -> String,
    ) -> Result<Duration, BenchError> {
        if self.progress.wait_for(total, limit).await {
            let first = self.sent.first().map_or(0, |s| s.load(Ordering::Relaxed));
            Ok(self
                .epoch
                .elapsed()
                .saturating_sub(Duration::from_nanos(first)))
        } else {
            Err(BenchError::Stalled(stalled(self.progress.done())))
        }
    }

    /// Milliseconds from send to apply of every applied message.
    #[must_use]
    pub fn latencies_ms(&self) -> Vec<f64> {
        self.sent
            .iter()
            .zip(&self.applied)
            .filter_map(|(s, a)| {
                let (s, a) = (s.load(Ordering::Relaxed), a.load(Ordering::Relaxed));
                (s > 0 && a >= s).then(|| (a - s) as f64 / 1e6)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_spread_evenly_and_do_not_overlap() {
        let mix = Mix {
            n: 20_000,
            fail_share: 0.10,
            poison_share: 0.01,
        };
        assert_eq!(mix.count(Kind::Undecodable), 200);
        let fails = mix.count(Kind::FailsOnce);
        assert!((1990..=2000).contains(&fails), "{fails}");
        assert_eq!(mix.applied_total(), 20_000 - 200);
        let none = Mix {
            n: 100,
            fail_share: 0.0,
            poison_share: 0.0,
        };
        assert_eq!(none.count(Kind::Good), 100);
    }

    #[test]
    fn an_undecodable_message_keeps_its_size() {
        let mix = Mix {
            n: 200,
            fail_share: 0.1,
            poison_share: 0.01,
        };
        let i = (0..200)
            .find(|i| mix.kind(*i) == Kind::Undecodable)
            .unwrap();
        let m = mix.message(i, 512);
        assert!(m.body.len() >= 500);
        assert!(serde_json::from_slice::<serde_json::Value>(&m.body).is_err());
    }
}
