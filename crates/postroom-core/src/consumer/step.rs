//! The decision for one message, shared by the consumer loop and the inbox-queue workers:
//! bound crash loops, decode (a failure parks at once), call the handler under its timeout
//! (a panic is an unknown error), tell the circuit breaker what the outcome says about the
//! dependency, and map the result to a [`Disposition`] through the retry policy.

use super::ConsumerConfig;
use super::breaker::CircuitBreaker;
use crate::envelope::Envelope;
use crate::error::ErrorClass;
use crate::handler::{Handler, Incoming};
use crate::metrics as m;
use crate::outcome::{Disposition, Handled, HandlerError, ParkReason, codes};
use crate::retry::Attempt;
use crate::stats::ConsumerStats;
use crate::transport::ReceivedMessage;
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
            tracing::error!(consumer = %self.config.name, deliveries = n, "ALERT: message delivered {n} times without being settled: parking it (it kills or hangs its consumer)");
            ParkReason {
                error_class: ErrorClass::Unknown,
                error_code: codes::CRASH_LOOP.into(),
                error_message: format!(
                    "delivered {n} times without being settled (the consumer died or hung while handling it); the bound is {}",
                    self.crash_loop_bound
                ),
            }
        })
    }

    /// Decode the body; the park reason when it cannot be.
    pub fn decode(&self, msg: &ReceivedMessage) -> Result<Envelope, ParkReason> {
        self.config.decoder.decode_message(msg).map_err(|e| {
            tracing::warn!(error = %e, "undecodable message: parking at once");
            ParkReason {
                error_class: ErrorClass::Permanent,
                error_code: e.code().into(),
                error_message: e.to_string(),
            }
        })
    }

    /// Map a handler result to a disposition, and tell the breaker and the counters.
    pub fn classify(
        &self,
        result: Result<Handled, HandlerError>,
        attempt: u32,
        envelope: &Envelope,
    ) -> Disposition {
        let cfg = &self.config;
        match result {
            Ok(handled) => {
                self.breaker.record_success();
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
                    if self.breaker.record_failure() {
                        tracing::warn!(consumer = %cfg.name, "circuit breaker opened: pausing consumption");
                    }
                } else {
                    self.breaker.record_neutral();
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
    /// Decode, bound the crash loop, handle and decide.
    pub async fn decide(&self, msg: &ReceivedMessage) -> Decision {
        if let Some(reason) = self.crash_loop(msg) {
            self.breaker.record_neutral();
            return Decision {
                disposition: Disposition::Park(reason),
                envelope: self.config.decoder.decode_message(msg).ok(),
            };
        }
        let envelope = match self.decode(msg) {
            Ok(e) => e,
            Err(reason) => {
                self.breaker.record_neutral();
                return Decision {
                    disposition: Disposition::Park(reason),
                    envelope: None,
                };
            }
        };
        let disposition = self.handle(msg, &envelope, msg.attempt()).await;
        Decision {
            disposition,
            envelope: Some(envelope),
        }
    }

    /// Run the handler on a decoded message that has been retried `attempt` times, and
    /// decide.
    pub async fn handle(
        &self,
        msg: &ReceivedMessage,
        envelope: &Envelope,
        attempt: u32,
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
        let call = AssertUnwindSafe(self.handler.handle(&incoming)).catch_unwind();
        let result = match tokio::time::timeout(cfg.handler_timeout, call).await {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => {
                let text = panic_text(panic.as_ref());
                metrics::counter!(m::HANDLER_PANICS, "consumer" => cfg.name.clone()).increment(1);
                tracing::error!(consumer = %cfg.name, panic = %text, "handler panicked: counted as an unknown error");
                Err(HandlerError::unknown(
                    codes::HANDLER_PANIC,
                    format!("handler panicked: {text}"),
                ))
            }
            Err(_) => Err(HandlerError::transient(
                codes::HANDLER_TIMEOUT,
                format!("handler took over {:?}", cfg.handler_timeout),
            )),
        };
        metrics::histogram!(m::HANDLING_SECONDS, "consumer" => cfg.name.clone())
            .record(started.elapsed().as_secs_f64());
        self.classify(result, attempt, envelope)
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
