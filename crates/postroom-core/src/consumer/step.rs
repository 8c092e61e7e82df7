//! The decision for one message, shared by the consumer loop, the batch lanes and the
//! inbox-queue workers: screen it ([`Step::screen`]: bound crash loops, decode — either
//! failure parks at once), call the handler under its timeout (a panic is an unknown error),
//! give the circuit breaker the message's [`Verdict`], and map the result to a
//! [`Disposition`] through the retry policy. What a step may do is bound to its transport's
//! capabilities once ([`Step::bound_to`]).

use super::ConsumerConfig;
use super::breaker::{CircuitBreaker, Verdict};
use crate::envelope::Envelope;
use crate::error::ErrorClass;
use crate::handler::{Handler, Incoming};
use crate::metrics as m;
use crate::outcome::codes::Code;
use crate::outcome::{Disposition, Handled, HandlerError, ParkReason};
use crate::retry::Attempt;
use crate::stats::ConsumerStats;
use crate::transport::{Capabilities, ReceivedMessage};
use chrono::Utc;
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

/// What was decided for one message.
#[derive(Clone, Debug)]
pub struct Decision {
    /// Ack, retry or park.
    pub disposition: Disposition,
    /// The envelope, when the body could be decoded.
    pub envelope: Option<Envelope>,
}

/// What screening found for one message.
#[derive(Debug)]
pub enum Screened {
    /// Park it without handling (a crash loop, an undecodable body). Its breaker verdict was
    /// neutral.
    Park {
        /// Why.
        reason: ParkReason,
        /// The envelope, when the body could be decoded.
        envelope: Option<Envelope>,
    },
    /// Handle it; `verdict` is owed once the outcome is known (dropping it is neutral).
    Handle {
        /// The decoded envelope.
        envelope: Envelope,
        /// What the message owes the circuit breaker.
        verdict: Verdict,
    },
}

/// Decides what happens to messages of one consumer.
pub struct Step<H: ?Sized> {
    pub(crate) config: Arc<ConsumerConfig>,
    pub(crate) handler: Arc<H>,
    pub(crate) breaker: Arc<CircuitBreaker>,
    pub(crate) stats: Arc<ConsumerStats>,
    /// From this delivery number a copy is parked without handling (crash-loop bound).
    pub(crate) crash_loop_bound: u32,
}

impl<H: ?Sized> Clone for Step<H> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            handler: self.handler.clone(),
            breaker: self.breaker.clone(),
            stats: self.stats.clone(),
            crash_loop_bound: self.crash_loop_bound,
        }
    }
}

impl<H: ?Sized> Step<H> {
    /// The park reason when `msg` reached the crash-loop bound: it was delivered that many
    /// times without settling, so its handling kills or hangs the consumer.
    #[must_use]
    pub fn crash_loop(&self, msg: &ReceivedMessage) -> Option<ParkReason> {
        let n = msg.deliveries?;
        (n >= self.crash_loop_bound && self.crash_loop_bound > 0).then(|| {
            ParkReason {
                error_class: ErrorClass::Unknown,
                error_code: Code::CrashLoop.as_str().into(),
                error_message: format!(
                    "delivered {n} times without being settled (the consumer died or hung while handling it); the bound is {}",
                    self.crash_loop_bound
                ),
            }
        })
    }

    /// Decode the body; the park reason when it cannot be.
    pub fn decode(&self, msg: &ReceivedMessage) -> Result<Envelope, ParkReason> {
        self.config
            .decoder
            .decode_message(msg)
            .map_err(|e| ParkReason {
                error_class: ErrorClass::Permanent,
                error_code: e.code().into(),
                error_message: e.to_string(),
            })
    }

    /// The first part of the decision, before any handler runs: a copy at the crash-loop
    /// bound or an undecodable body is to be parked (its breaker verdict neutral); any other
    /// message is to be handled, with the verdict it owes the breaker.
    pub fn screen(&self, msg: &ReceivedMessage) -> Screened {
        let verdict = Verdict::owed_to(self.breaker.clone());
        if let Some(reason) = self.crash_loop(msg) {
            verdict.neutral();
            return Screened::Park {
                reason,
                envelope: self.config.decoder.decode_message(msg).ok(),
            };
        }
        match self.decode(msg) {
            Ok(envelope) => Screened::Handle { envelope, verdict },
            Err(reason) => {
                verdict.neutral();
                Screened::Park {
                    reason,
                    envelope: None,
                }
            }
        }
    }

    /// Map a handler result to a disposition, and give the breaker its verdict and the
    /// counters their figures.
    pub fn classify(
        &self,
        result: Result<Handled, HandlerError>,
        attempt: u32,
        envelope: &Envelope,
        verdict: Verdict,
    ) -> Disposition {
        let cfg = &self.config;
        match result {
            Ok(handled) => {
                verdict.success();
                let label = match &handled {
                    Handled::Applied => "applied",
                    Handled::Duplicate => "duplicate",
                    Handled::BusinessOutcome(_) => "business_outcome",
                };
                metrics::counter!(m::HANDLED, "consumer" => cfg.name.clone(), "result" => label)
                    .increment(1);
                metrics::histogram!(m::RETRIES_PER_MESSAGE, "consumer" => cfg.name.clone())
                    .record(f64::from(attempt));
                self.stats.record_handled(&handled);
                Disposition::Ack
            }
            Err(err) => {
                metrics::counter!(m::HANDLER_ERRORS, "consumer" => cfg.name.clone(), "class" => err.class.as_str()).increment(1);
                if err.is_dependency_failure() {
                    if verdict.failure() {
                        tracing::warn!(consumer = %cfg.name, "circuit breaker opened: pausing consumption");
                    }
                } else {
                    verdict.neutral();
                }
                let a = Attempt {
                    attempt,
                    occurred_at: Some(envelope.occurred_at),
                    now: Utc::now(),
                    class: err.class,
                    code: &err.code,
                    message: &err.message,
                };
                cfg.retry.decide(&a, rand::random())
            }
        }
    }
}

impl<H: ?Sized> Step<H> {
    /// A step for `config` running `handler`, with its own breaker and counters; copies that
    /// reached `config.max_deliveries` deliveries are parked without handling.
    #[must_use]
    pub fn new(config: ConsumerConfig, handler: Arc<H>) -> Self {
        let breaker = Arc::new(CircuitBreaker::new(config.breaker.clone()));
        Self {
            crash_loop_bound: config.max_deliveries,
            config: Arc::new(config),
            handler,
            breaker,
            stats: Arc::new(ConsumerStats::default()),
        }
    }

    /// This step bound to what its transport can do, in the one place that does it: the
    /// transport must keep the retry ladder, a fixed lease must outlast the handler timeout,
    /// and crash loops are bounded by the lower of the step's bound and the transport's own
    /// delivery limit (so the consumer parks the last delivery the transport makes, with its
    /// diagnostics). A refusal names the consumer.
    pub fn bound_to(mut self, capabilities: &Capabilities) -> crate::Result<Self> {
        let cfg = &self.config;
        if cfg.concurrency == 0 {
            return Err(self.refusal(crate::ErrorKind::Config, "concurrency must be at least 1"));
        }
        capabilities
            .check_consumer(&cfg.retry.ladder, cfg.handler_timeout, cfg.max_deliveries)
            .map_err(|e| self.refusal(e.kind(), e.message()))?;
        self.crash_loop_bound = capabilities.crash_loop_bound(self.crash_loop_bound);
        Ok(self)
    }

    /// A refusal of this consumer's settings, naming it.
    pub(crate) fn refusal(&self, kind: crate::ErrorKind, why: &str) -> crate::Error {
        crate::Error::new(kind, format!("consumer {:?}: {why}", self.config.name))
    }

    /// From this delivery number a copy is parked without handling.
    #[must_use]
    pub fn crash_loop_bound(&self) -> u32 {
        self.crash_loop_bound
    }

    /// The consumer's settings.
    #[must_use]
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> Arc<ConsumerStats> {
        self.stats.clone()
    }

    /// The circuit breaker loops consult before pulling.
    #[must_use]
    pub fn breaker(&self) -> &CircuitBreaker {
        &self.breaker
    }
}

impl<H: Handler + ?Sized> Step<H> {
    /// Screen, handle and decide.
    pub async fn decide(&self, msg: &ReceivedMessage) -> Decision {
        match self.screen(msg) {
            Screened::Park { reason, envelope } => Decision {
                disposition: Disposition::Park(reason),
                envelope,
            },
            Screened::Handle { envelope, verdict } => {
                let disposition = self.handle(msg, &envelope, msg.attempt(), verdict).await;
                Decision {
                    disposition,
                    envelope: Some(envelope),
                }
            }
        }
    }

    /// Run the handler on a decoded message that has been retried `attempt` times, and
    /// decide; `verdict` is given by the outcome.
    pub async fn handle(
        &self,
        msg: &ReceivedMessage,
        envelope: &Envelope,
        attempt: u32,
        verdict: Verdict,
    ) -> Disposition {
        let cfg = &self.config;
        let incoming = Incoming {
            envelope: envelope.clone(),
            attempt,
            redelivered: msg.redelivered,
            routing_key: msg.routing_key.clone(),
            headers: msg.headers.clone(),
        };
        let started = Instant::now();
        let result = guarded(cfg, "handler", self.handler.handle(&incoming)).await;
        metrics::histogram!(m::HANDLING_SECONDS, "consumer" => cfg.name.clone())
            .record(started.elapsed().as_secs_f64());
        self.classify(result, attempt, envelope, verdict)
    }
}

/// Run one handler call (`what`: "handler", "batch handler") under the consumer's timeout:
/// one that takes longer is a transient error, a panic an unknown error that keeps the panic's
/// text. The one guard every loop calls its handler through.
pub(crate) async fn guarded<T>(
    cfg: &ConsumerConfig,
    what: &str,
    call: impl std::future::Future<Output = Result<T, HandlerError>>,
) -> Result<T, HandlerError> {
    match tokio::time::timeout(cfg.handler_timeout, AssertUnwindSafe(call).catch_unwind()).await {
        Ok(Ok(r)) => r,
        Ok(Err(panic)) => {
            let text = panic_text(panic.as_ref());
            metrics::counter!(m::HANDLER_PANICS, "consumer" => cfg.name.clone()).increment(1);
            tracing::error!(consumer = %cfg.name, panic = %text, "{what} panicked: counted as an unknown error");
            Err(HandlerError::unknown(
                Code::HandlerPanic.as_str(),
                format!("{what} panicked: {text}"),
            ))
        }
        Err(_) => Err(HandlerError::transient(
            Code::HandlerTimeout.as_str(),
            format!("{what} took over {:?}", cfg.handler_timeout),
        )),
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}
