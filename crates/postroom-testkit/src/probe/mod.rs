//! A handler for transport tests: fails or dawdles on demand and records every call; with
//! [`Probe::with_inbox`] it also claims the inbox row and counts an effect in one SQLite
//! transaction. [`spawn`] runs it in the core consumer loop.

#[cfg(feature = "sqlite")]
mod inbox;
pub mod runner;

pub use crate::running::{Running, spawn};
#[cfg(feature = "sqlite")]
pub use inbox::store_at;
pub use runner::{config, first_transient_retry, outlasting_a_crash, policy};

use async_trait::async_trait;
use postroom_core::{Handled, Handler, HandlerError, Incoming, MessageId};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the probe does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Succeed (apply the effect, when there is one).
    Ok,
    /// Fail transiently while the attempt is below this, then succeed.
    FailBelow(u32),
    /// Fail transiently on attempts below `.1` of messages at aggregate version `.0`;
    /// succeed otherwise.
    FailVersionBelow(u64, u32),
    /// Fail transiently when the aggregate key contains this text; succeed otherwise.
    FailKeysWith(&'static str),
    /// Always fail transiently.
    Transient,
    /// Always fail permanently.
    Permanent,
    /// Take this long on every call, then succeed.
    Slow(Duration),
    /// Take this long on the first call of each message, then succeed.
    SlowFirst(Duration),
}

impl Mode {
    /// The failure this mode injects into the call `m`, if any.
    fn failure(self, m: &Incoming) -> Option<HandlerError> {
        let e = &m.envelope;
        let transient = |why: &str| Some(HandlerError::transient("dependency_down", why));
        match self {
            Mode::Ok | Mode::Slow(_) | Mode::SlowFirst(_) => None,
            Mode::FailBelow(n) if m.attempt < n => transient("injected"),
            Mode::FailBelow(_) => None,
            Mode::FailVersionBelow(v, n) if e.aggregate.version == v && m.attempt < n => {
                transient("injected for this version")
            }
            Mode::FailVersionBelow(..) => None,
            Mode::FailKeysWith(t) if e.aggregate.key().contains(t) => {
                transient("injected for this key")
            }
            Mode::FailKeysWith(_) => None,
            Mode::Transient => transient("injected: never recovers"),
            Mode::Permanent => Some(HandlerError::permanent(
                "rejected_by_test",
                "injected permanent failure",
            )),
        }
    }
}

/// What a call returned.
pub mod outcome {
    /// The handler has not returned yet.
    pub const RUNNING: &str = "running";
    /// Succeeded (the effect was applied, when there is one).
    pub const APPLIED: &str = "applied";
    /// Succeeded without applying: the inbox had the message already.
    pub const DUPLICATE: &str = "duplicate";
    /// Failed.
    pub const FAILED: &str = "failed";
}

/// One call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Message id.
    pub id: MessageId,
    /// `x-retry-attempt` of the delivery.
    pub attempt: u32,
    /// When the handler was entered.
    pub at: Instant,
    /// When the handler returned (a retry is due no earlier than this plus its delay).
    pub done: Option<Instant>,
    /// Aggregate key.
    pub key: String,
    /// Aggregate version.
    pub version: u64,
    /// What the call returned: one of [`outcome`].
    pub outcome: &'static str,
}

/// The probe handler.
pub struct Probe {
    mode: Mutex<Mode>,
    calls: Mutex<Vec<Call>>,
    #[cfg(feature = "sqlite")]
    inbox: Option<inbox::SqliteInbox>,
}

impl Probe {
    /// A probe that succeeds without an effect (unless `mode` says otherwise).
    pub fn new(mode: Mode) -> Arc<Self> {
        Arc::new(Self {
            mode: Mutex::new(mode),
            calls: Mutex::new(Vec::new()),
            #[cfg(feature = "sqlite")]
            inbox: None,
        })
    }

    /// Change what the probe does.
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Calls for one message id.
    pub fn calls_for(&self, id: MessageId) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.id == id).collect()
    }

    /// Calls that found their message in the inbox already (and applied nothing).
    pub fn duplicates(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.outcome == outcome::DUPLICATE)
            .count()
    }

    /// Whether the message `id` reached the probe within `bound`.
    pub async fn handled_within(&self, id: MessageId, bound: std::time::Duration) -> bool {
        crate::wait::eventually(bound, || async { !self.calls_for(id).is_empty() }).await
    }

    /// Succeed: through the inbox when the probe has one.
    async fn succeed(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        #[cfg(feature = "sqlite")]
        if let Some(inbox) = &self.inbox {
            return inbox.apply(m).await;
        }
        let _ = m;
        Ok(Handled::Applied)
    }
}

#[async_trait]
impl Handler for Probe {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let e = &m.envelope;
        let (index, first) = {
            let mut calls = self.calls.lock().unwrap();
            let first = !calls.iter().any(|c| c.id == e.id);
            calls.push(Call {
                id: e.id,
                attempt: m.attempt,
                at: Instant::now(),
                done: None,
                key: e.aggregate.key(),
                version: e.aggregate.version,
                outcome: outcome::RUNNING,
            });
            (calls.len() - 1, first)
        };
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Slow(d) => tokio::time::sleep(d).await,
            Mode::SlowFirst(d) if first => tokio::time::sleep(d).await,
            _ => {}
        }
        let result = match mode.failure(m) {
            Some(error) => Err(error),
            None => self.succeed(m).await,
        };
        let mut calls = self.calls.lock().unwrap();
        calls[index].done = Some(Instant::now());
        calls[index].outcome = match &result {
            Ok(Handled::Applied) => outcome::APPLIED,
            Ok(_) => outcome::DUPLICATE,
            Err(_) => outcome::FAILED,
        };
        result
    }
}
