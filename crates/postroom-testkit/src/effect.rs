//! The suite's handler: applies a counted effect through the backend's inbox, with faults
//! injected on demand, and records every call.

use crate::fixture::Backend;
use async_trait::async_trait;
use postroom_core::{Handled, Handler, HandlerError, Incoming, MessageId};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the handler does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Apply the effect.
    None,
    /// Fail transiently on the first `n` attempts of each message, then apply.
    TransientTimes(u32),
    /// Always fail transiently (a dependency that never comes back).
    AlwaysTransient,
    /// Always fail permanently.
    Permanent,
    /// Always fail with an unclassified error.
    Unknown,
    /// Return a business outcome without an effect.
    BusinessOutcome,
    /// On the first `n` attempts of each message, take this long before applying (longer
    /// than the handler timeout: the consumer abandons the call).
    SlowTimes(u32, std::time::Duration),
}

/// One handler call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Message id.
    pub id: MessageId,
    /// `x-retry-attempt` of the delivery.
    pub attempt: u32,
    /// When the handler was entered.
    pub at: Instant,
    /// Aggregate key and version.
    pub aggregate: (String, u64),
    /// Message type.
    pub message_type: String,
}

/// A handler that applies `effect:<aggregate id>` through [`Backend::apply_effect`].
pub struct EffectHandler {
    backend: Arc<Backend>,
    consumer: String,
    fault: Mutex<Fault>,
    calls: Mutex<Vec<Call>>,
}

impl EffectHandler {
    /// A handler for `consumer`.
    pub fn new(backend: Arc<Backend>, consumer: &str, fault: Fault) -> Arc<Self> {
        Arc::new(Self {
            backend,
            consumer: consumer.into(),
            fault: Mutex::new(fault),
            calls: Mutex::new(Vec::new()),
        })
    }

    /// Change the fault (e.g. heal the dependency).
    pub fn set_fault(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Calls for one message id.
    pub fn calls_for(&self, id: MessageId) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.id == id).collect()
    }
}

#[async_trait]
impl Handler for EffectHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let env = &m.envelope;
        self.calls.lock().unwrap().push(Call {
            id: env.id,
            attempt: m.attempt,
            at: Instant::now(),
            aggregate: (env.aggregate.key(), env.aggregate.version),
            message_type: env.message_type.clone(),
        });
        let fault = self.fault.lock().unwrap().clone();
        match fault {
            Fault::None => {}
            Fault::TransientTimes(n) if m.attempt < n => {
                return Err(HandlerError::transient(
                    "dependency_down",
                    format!("injected transient failure on attempt {}", m.attempt),
                ));
            }
            Fault::TransientTimes(_) => {}
            Fault::AlwaysTransient => {
                return Err(HandlerError::transient(
                    "dependency_down",
                    "injected: dependency never recovers",
                ));
            }
            Fault::Permanent => {
                return Err(HandlerError::permanent(
                    "rejected_by_test",
                    "injected permanent failure",
                ));
            }
            Fault::Unknown => {
                return Err(HandlerError::unknown(
                    "mystery",
                    "injected unclassified failure",
                ));
            }
            Fault::BusinessOutcome => return Ok(Handled::BusinessOutcome("rejected".into())),
            Fault::SlowTimes(n, pause) if m.attempt < n => tokio::time::sleep(pause).await,
            Fault::SlowTimes(..) => {}
        }
        let key = crate::cases::effect_key(env);
        self.backend
            .apply_effect(&self.consumer, env.id, &key)
            .await
            .map_err(HandlerError::from)
    }
}

/// A handler that records the aggregate and version of each message it is called with, in
/// call order, after an optional pause (a handler that takes time, so workers overlap), and
/// applies nothing else: ordering tests read the order back per aggregate.
#[derive(Debug, Default)]
pub struct VersionLog {
    pause: std::time::Duration,
    calls: Mutex<Vec<(String, u64)>>,
}

impl VersionLog {
    /// A log whose handler takes `pause` per call.
    #[must_use]
    pub fn pausing(pause: std::time::Duration) -> Self {
        Self {
            pause,
            calls: Mutex::default(),
        }
    }

    /// Every call so far: (aggregate, version), in call order.
    pub fn calls(&self) -> Vec<(String, u64)> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The versions of `agg` once `n` were handled, or those handled when `within` ran out.
    pub async fn versions_once(
        &self,
        agg: &str,
        n: usize,
        within: std::time::Duration,
    ) -> Vec<u64> {
        let until = Instant::now() + within;
        loop {
            let seen = self.versions_of(agg);
            if seen.len() >= n || Instant::now() >= until {
                return seen;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The versions of aggregate `agg`, in the order they were handled.
    pub fn versions_of(&self, agg: &str) -> Vec<u64> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|c| c.0 == agg)
            .map(|c| c.1)
            .collect()
    }
}

#[async_trait]
impl Handler for VersionLog {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        if !self.pause.is_zero() {
            tokio::time::sleep(self.pause).await;
        }
        let e = &m.envelope;
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((e.aggregate.id.clone(), e.aggregate.version));
        Ok(Handled::Applied)
    }
}
