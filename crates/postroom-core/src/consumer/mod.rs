//! The consumer loop, written once against [`Subscriber`] and [`Delivery`].
//!
//! For each delivery: decode (a decode failure parks at once), call the handler, map the
//! result to a [`Disposition`](crate::Disposition) through the
//! [`RetryPolicy`], and settle: ack only after the handler returned (its
//! transaction committed), retry through the transport's delay, or park with diagnostics. A
//! bounded number of deliveries run at once; a circuit breaker stops pulling while a
//! dependency fails; a copy delivered too often without being settled is parked (crash loop).
//! With [`Ordering::PerKey`], deliveries that share an aggregate key are handled one at a
//! time in the order they arrived, other keys in parallel.

pub mod batch;
pub mod breaker;
mod keyed;
pub mod record;
mod settle;
pub mod step;

pub use batch::{BatchConfig, BatchConsumer};
pub use breaker::{BreakerConfig, CircuitBreaker};
pub use record::{log_parked, parked_record};
pub use step::{Decision, Screened, Step};

use crate::decode::EnvelopeDecoder;
use crate::error::Result;
use crate::handler::Handler;
use crate::metrics as m;
use crate::retry::RetryPolicy;
use crate::stats::ConsumerStats;
use crate::transport::{Capabilities, Delivery, Subscriber, Subscription, Transport};
use breaker::Admission;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

/// How deliveries of one consumer are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ordering {
    /// Any order, up to `concurrency` at once (order is kept by the version guard).
    #[default]
    Unordered,
    /// Deliveries with the same aggregate key one at a time, in the order they arrived;
    /// different keys in parallel. Keeps a partitioned transport's per-key order.
    PerKey,
}

/// Consumer settings.
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// Consumer name: the inbox key, the queue prefix, the parking record's owner.
    pub name: String,
    /// Consumer version, stored with parked messages.
    pub version: String,
    /// Deliveries handled at once (≥ 1).
    pub concurrency: usize,
    /// What bodies are accepted.
    pub decoder: EnvelopeDecoder,
    /// Retry budget.
    pub retry: RetryPolicy,
    /// Circuit breaker.
    pub breaker: BreakerConfig,
    /// Longest time one handler call may take before it counts as a transient failure.
    pub handler_timeout: Duration,
    /// Deliveries of one copy after which it is parked without handling: the bound on a
    /// message whose handling kills or hangs the consumer (the transport's own limit is used
    /// when it is lower).
    pub max_deliveries: u32,
    /// Order of handling.
    pub ordering: Ordering,
}

impl ConsumerConfig {
    /// Settings with defaults for everything but the name and decoder.
    #[must_use]
    pub fn new(name: impl Into<String>, decoder: EnvelopeDecoder) -> Self {
        Self {
            name: name.into(),
            version: "0".into(),
            concurrency: 4,
            decoder,
            retry: RetryPolicy::default(),
            breaker: BreakerConfig::default(),
            handler_timeout: Duration::from_secs(30),
            max_deliveries: 10,
            ordering: Ordering::Unordered,
        }
    }
}

/// A consumer: the loop plus its shared state.
pub struct Consumer<H: ?Sized> {
    step: Step<H>,
}

impl<H: Handler + ?Sized> Consumer<H> {
    /// A consumer running `handler`, not checked against a transport (see
    /// [`Consumer::for_transport`]).
    ///
    /// # Panics
    /// When `config.concurrency` is 0.
    pub fn new(config: ConsumerConfig, handler: Arc<H>) -> Self {
        assert!(
            config.concurrency >= 1,
            "consumer concurrency must be at least 1"
        );
        Self {
            step: Step::new(config, handler),
        }
    }

    /// A consumer checked against what its transport can do: the retry ladder must be one the
    /// transport keeps, a fixed lease must outlast the handler timeout, and crash loops are
    /// bounded by the lower of the configured and the transport's delivery limits
    /// ([`Step::bound_to`]). A failed check is a clear configuration error now, naming the
    /// consumer, not a surprise at the first retry.
    pub fn for_transport(
        config: ConsumerConfig,
        handler: Arc<H>,
        capabilities: &Capabilities,
    ) -> Result<Self> {
        let step = Step::new(config, handler).bound_to(capabilities)?;
        Ok(Self { step })
    }

    /// Counters of what this consumer did.
    #[must_use]
    pub fn stats(&self) -> Arc<ConsumerStats> {
        self.step.stats()
    }

    /// The decision step (decode, handle, decide, settle) this consumer runs per delivery.
    #[must_use]
    pub fn step(&self) -> &Step<H> {
        &self.step
    }

    /// Subscribe to `transport` and run until `shutdown` turns true, bound to what the
    /// transport can do as [`Consumer::for_transport`] binds it (a consumer built with
    /// [`Consumer::new`] is checked, and its crash-loop bound lowered to the transport's
    /// delivery limit, here). Fails at once when the transport cannot keep this consumer's
    /// settings or refuses the subscription.
    pub async fn run_on(
        &self,
        transport: &dyn Transport,
        subscription: &Subscription,
        shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let step = self.step.clone().bound_to(&transport.capabilities())?;
        subscription.validate()?;
        let sub = transport.subscribe(subscription).await?;
        run_step(&step, sub, shutdown).await;
        Ok(())
    }

    /// Pull and handle until `shutdown` turns true; then stop pulling and let in-flight
    /// deliveries finish (graceful shutdown). Transport errors are retried with a bounded,
    /// jittered backoff.
    pub async fn run<S: Subscriber>(&self, subscriber: S, shutdown: watch::Receiver<bool>) {
        run_step(&self.step, subscriber, shutdown).await;
    }

    /// Handle and settle one delivery (what `run` does per delivery).
    pub async fn process<D: Delivery>(&self, delivery: D) {
        self.step.process(delivery).await;
    }
}

/// The consumer loop of `step` on `subscriber` until `shutdown` turns true.
async fn run_step<H: Handler + ?Sized, S: Subscriber>(
    step: &Step<H>,
    mut subscriber: S,
    mut shutdown: watch::Receiver<bool>,
) {
    let cfg = step.config.clone();
    let handling = Arc::new(Semaphore::new(cfg.concurrency));
    // Per-key mode holds deliveries that wait for their key: bounded too.
    let held_limit = match cfg.ordering {
        Ordering::Unordered => cfg.concurrency,
        Ordering::PerKey => cfg.concurrency.saturating_mul(4),
    };
    let held = Arc::new(Semaphore::new(held_limit));
    let keys = keyed::KeyedQueues::default();
    let mut backoff =
        crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    let name = cfg.name.clone();
    let breaker = step.breaker.clone();
    loop {
        // A dropped sender counts as a shutdown, so a lost handle never spins this loop.
        if *shutdown.borrow() || shutdown.has_changed().is_err() {
            break;
        }
        metrics::gauge!(m::BREAKER_OPEN, "consumer" => name.clone()).set(if breaker.is_open() {
            1.0
        } else {
            0.0
        });
        if let Admission::Wait(pause) = breaker.admit() {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        let slot = tokio::select! {
            p = held.clone().acquire_owned() => p.expect("semaphore is never closed"),
            _ = shutdown.changed() => continue,
        };
        // Never cancelled: a receive may be inside a store transaction (a lease being
        // taken), and dropping it halfway could leave that transaction open. It returns
        // within its short wait, so shutdown is still prompt.
        let next = subscriber.next(Duration::from_millis(500)).await;
        breaker.pulled(matches!(next, Ok(Some(_))));
        match next {
            Ok(Some(delivery)) => {
                backoff.reset();
                let key = match cfg.ordering {
                    Ordering::PerKey => delivery.message().ordering_key().map(str::to_string),
                    Ordering::Unordered => None,
                };
                let job = keyed::Job {
                    delivery,
                    slot,
                    handling: handling.clone(),
                    step: step.clone(),
                };
                match key {
                    Some(key) => keys.dispatch(key, job),
                    None => {
                        tokio::spawn(job.run());
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                let d = backoff.next_delay();
                tracing::warn!(consumer = %name, error = %e, retry_in_ms = d.as_millis() as u64, "receive failed");
                tokio::time::sleep(d).await;
            }
        }
    }
    // Graceful shutdown: wait for every held and in-flight delivery to settle.
    let _all = held.acquire_many(held_limit as u32).await;
    subscriber.close().await;
}

#[cfg(test)]
mod tests;
