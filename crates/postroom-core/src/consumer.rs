//! The consumer loop, written once against [`Subscriber`] and [`Delivery`].
//!
//! For each delivery: decode (a decode failure parks at once), call the handler, map the
//! result to a [`Disposition`] through the [`RetryPolicy`], and settle: ack only after the
//! handler returned (its transaction committed), retry through the broker's delay stage,
//! or park with diagnostics. A bounded number of deliveries run at once; a circuit breaker
//! stops pulling while a dependency fails.

use crate::breaker::{BreakerConfig, CircuitBreaker};
use crate::decode::EnvelopeDecoder;
use crate::envelope::Envelope;
use crate::error::ErrorClass;
use crate::handler::{Handler, Incoming};
use crate::message::{headers as h, truncate};
use crate::metrics as m;
use crate::outcome::{Disposition, Handled, HandlerError, ParkReason};
use crate::parking::{MAX_ERROR_CHARS, ParkedMessage, ParkedStatus};
use crate::retry::{Attempt, RetryPolicy};
use crate::stats::ConsumerStats;
use crate::transport::{Delivery, ReceivedMessage, Subscriber};
use chrono::Utc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, watch};
use tracing::Instrument;

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
        }
    }
}

/// A consumer: the loop plus its shared state.
pub struct Consumer<H: ?Sized> {
    config: Arc<ConsumerConfig>,
    handler: Arc<H>,
    breaker: Arc<CircuitBreaker>,
    stats: Arc<ConsumerStats>,
}

impl<H: Handler + ?Sized> Consumer<H> {
    /// A consumer running `handler`.
    pub fn new(config: ConsumerConfig, handler: Arc<H>) -> Self {
        assert!(
            config.concurrency >= 1,
            "consumer concurrency must be at least 1"
        );
        let breaker = Arc::new(CircuitBreaker::new(config.breaker.clone()));
        Self {
            config: Arc::new(config),
            handler,
            breaker,
            stats: Arc::new(ConsumerStats::default()),
        }
    }

    /// Counters of what this consumer did.
    #[must_use]
    pub fn stats(&self) -> Arc<ConsumerStats> {
        self.stats.clone()
    }

    /// Pull and handle until `shutdown` turns true; then stop pulling and let in-flight
    /// deliveries finish (graceful shutdown). Transport errors are retried with a bounded,
    /// jittered backoff.
    pub async fn run<S: Subscriber>(&self, mut subscriber: S, mut shutdown: watch::Receiver<bool>) {
        let permits = Arc::new(Semaphore::new(self.config.concurrency));
        let mut backoff =
            crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let name = self.config.name.clone();
        loop {
            // A dropped sender counts as a shutdown, so a lost handle never spins this loop.
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                break;
            }
            if let Some(pause) = self.breaker.pause() {
                metrics::gauge!(m::BREAKER_OPEN, "consumer" => name.clone()).set(1.0);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            metrics::gauge!(m::BREAKER_OPEN, "consumer" => name.clone()).set(0.0);
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("semaphore is never closed"),
                _ = shutdown.changed() => continue,
            };
            // Never cancelled: a receive may be inside a store transaction (a lease being
            // taken), and dropping it halfway could leave that transaction open. It returns
            // within its short wait, so shutdown is still prompt.
            let next = subscriber.next(Duration::from_millis(500)).await;
            match next {
                Ok(Some(delivery)) => {
                    backoff.reset();
                    let worker = Worker {
                        config: self.config.clone(),
                        handler: self.handler.clone(),
                        breaker: self.breaker.clone(),
                        stats: self.stats.clone(),
                    };
                    tokio::spawn(async move {
                        worker.process(delivery).await;
                        drop(permit);
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    let d = backoff.next_delay();
                    tracing::warn!(consumer = %name, error = %e, retry_in_ms = d.as_millis() as u64, "receive failed");
                    tokio::time::sleep(d).await;
                }
            }
        }
        // Graceful shutdown: wait for every in-flight delivery to settle.
        let _all = permits.acquire_many(self.config.concurrency as u32).await;
    }

    /// Handle and settle one delivery (what `run` does per delivery).
    pub async fn process<D: Delivery>(&self, delivery: D) {
        Worker {
            config: self.config.clone(),
            handler: self.handler.clone(),
            breaker: self.breaker.clone(),
            stats: self.stats.clone(),
        }
        .process(delivery)
        .await;
    }
}

struct Worker<H: ?Sized> {
    config: Arc<ConsumerConfig>,
    handler: Arc<H>,
    breaker: Arc<CircuitBreaker>,
    stats: Arc<ConsumerStats>,
}

impl<H: Handler + ?Sized> Worker<H> {
    async fn process<D: Delivery>(self, delivery: D) {
        let msg = delivery.message().clone();
        let id = msg.id.map(|i| i.to_string()).unwrap_or_default();
        let span = tracing::info_span!(
            "postroom.handle",
            consumer = %self.config.name,
            message_id = %id,
            correlation_id = msg.headers.get(h::CORRELATION_ID).map(String::as_str).unwrap_or(""),
            attempt = msg.attempt(),
            redelivered = msg.redelivered,
        );
        async move {
            let (disposition, envelope) = self.decide(&msg).await;
            self.settle(delivery, &msg, envelope.as_ref(), disposition)
                .await;
        }
        .instrument(span)
        .await;
    }

    async fn decide(&self, msg: &ReceivedMessage) -> (Disposition, Option<Envelope>) {
        let cfg = &self.config;
        let envelope = match cfg.decoder.decode(&msg.body) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "undecodable message: parking at once");
                let reason = ParkReason {
                    error_class: ErrorClass::Permanent,
                    error_code: e.code().into(),
                    error_message: e.to_string(),
                };
                return (Disposition::Park(reason), None);
            }
        };
        let incoming = Incoming {
            envelope,
            attempt: msg.attempt(),
            redelivered: msg.redelivered,
            routing_key: msg.routing_key.clone(),
            headers: msg.headers.clone(),
        };
        let started = Instant::now();
        let result =
            match tokio::time::timeout(cfg.handler_timeout, self.handler.handle(&incoming)).await {
                Ok(r) => r,
                Err(_) => Err(HandlerError::transient(
                    "handler_timeout",
                    format!("handler took over {:?}", cfg.handler_timeout),
                )),
            };
        metrics::histogram!(m::HANDLING_SECONDS, "consumer" => cfg.name.clone())
            .record(started.elapsed().as_secs_f64());
        let disposition = match result {
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
                    .record(f64::from(incoming.attempt));
                self.stats.record_handled(&handled);
                Disposition::Ack
            }
            Err(err) => {
                metrics::counter!(m::HANDLER_ERRORS, "consumer" => cfg.name.clone(), "class" => err.class.as_str()).increment(1);
                if err.class == ErrorClass::Transient
                    && err.code != "version_gap"
                    && self.breaker.record_failure()
                {
                    tracing::warn!(consumer = %cfg.name, "circuit breaker opened: pausing consumption");
                }
                let attempt = Attempt {
                    attempt: incoming.attempt,
                    occurred_at: Some(incoming.envelope.occurred_at),
                    now: Utc::now(),
                    class: err.class,
                    code: &err.code,
                    message: &err.message,
                };
                cfg.retry.decide(&attempt, rand::random())
            }
        };
        (disposition, Some(incoming.envelope))
    }

    async fn settle<D: Delivery>(
        &self,
        delivery: D,
        msg: &ReceivedMessage,
        envelope: Option<&Envelope>,
        d: Disposition,
    ) {
        let name = self.config.name.clone();
        match d {
            Disposition::Ack => {
                let mut delivery = delivery;
                for try_no in 0..3 {
                    match delivery.ack().await {
                        Ok(()) => return,
                        Err((e, back)) => {
                            metrics::counter!(m::SETTLE_FAILED, "consumer" => name.clone(), "act" => "ack").increment(1);
                            tracing::warn!(error = %e, try_no, "ack failed");
                            delivery = back;
                            tokio::time::sleep(Duration::from_millis(50 << try_no)).await;
                        }
                    }
                }
                self.stats.record_settle_failure();
                tracing::error!(
                    "ack kept failing: leaving the delivery to the broker, which redelivers it (the inbox absorbs it)"
                );
            }
            Disposition::Retry(plan) => match delivery.retry(&plan).await {
                Ok(()) => {
                    metrics::counter!(m::RETRIED, "consumer" => name, "stage" => plan.stage.to_string()).increment(1);
                    self.stats.record_retry(plan.stage);
                    tracing::info!(attempt = plan.attempt, stage = plan.stage, delay_ms = plan.delay.as_millis() as u64, error = %plan.error_message, "retry scheduled");
                }
                Err((e, _back)) => {
                    metrics::counter!(m::SETTLE_FAILED, "consumer" => name, "act" => "retry")
                        .increment(1);
                    self.stats.record_settle_failure();
                    tracing::error!(error = %e, "retry publish failed: original not acked, the broker redelivers it");
                }
            },
            Disposition::Park(reason) => {
                let record = parked_record(&self.config, msg, envelope, &reason);
                match delivery.park(&record).await {
                    Ok(()) => {
                        metrics::counter!(m::PARKED, "consumer" => name, "code" => reason.error_code.clone()).increment(1);
                        self.stats.record_parked(&reason.error_code);
                        tracing::warn!(code = %reason.error_code, error = %reason.error_message, "message parked");
                    }
                    Err((e, _back)) => {
                        metrics::counter!(m::SETTLE_FAILED, "consumer" => name, "act" => "park")
                            .increment(1);
                        self.stats.record_settle_failure();
                        tracing::error!(error = %e, "dead-lettering failed: the source keeps the message");
                    }
                }
            }
        }
    }
}

/// The parking record for a message, with every R11 diagnostic available.
#[must_use]
pub fn parked_record(
    cfg: &ConsumerConfig,
    msg: &ReceivedMessage,
    envelope: Option<&Envelope>,
    reason: &ParkReason,
) -> ParkedMessage {
    let now = Utc::now();
    let first_failure_at = msg
        .headers
        .get(h::FIRST_FAILURE_AT)
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map_or(now, |t| t.with_timezone(&Utc));
    let message_id = msg.id.or(envelope.map(|e| e.id)).unwrap_or_default();
    ParkedMessage {
        message_id,
        consumer: cfg.name.clone(),
        consumer_version: cfg.version.clone(),
        message_type: envelope
            .map(|e| e.message_type.clone())
            .or_else(|| msg.headers.get(h::MESSAGE_TYPE).cloned()),
        schema_version: envelope.map(|e| e.schema_version),
        attempts: msg.attempt() + 1,
        first_failure_at,
        parked_at: now,
        error_class: reason.error_class,
        error_code: reason.error_code.clone(),
        error_message: truncate(&reason.error_message, MAX_ERROR_CHARS),
        correlation_id: envelope
            .and_then(|e| e.correlation_id.clone())
            .or_else(|| msg.headers.get(h::CORRELATION_ID).cloned()),
        traceparent: envelope
            .and_then(|e| e.trace.traceparent.clone())
            .or_else(|| msg.headers.get(h::TRACEPARENT).cloned()),
        routing_key: msg
            .headers
            .get(h::ORIGINAL_ROUTE)
            .cloned()
            .unwrap_or_else(|| msg.routing_key.clone()),
        producer: envelope
            .map(|e| e.producer.clone())
            .or_else(|| msg.headers.get(h::PRODUCER).cloned()),
        headers: msg.headers.clone(),
        body: msg.body.clone(),
        status: ParkedStatus::Parked,
        redrive_count: msg
            .headers
            .get(h::REDRIVE_COUNT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    }
}

/// Headers for the retry copy of `msg` under `plan` (same id; attempt, first failure and
/// last error recorded). Transports use this so every broker carries the same bookkeeping.
#[must_use]
pub fn retry_headers(
    msg: &ReceivedMessage,
    plan: &crate::outcome::RetryPlan,
) -> crate::message::Headers {
    let mut headers = msg.headers.clone();
    headers.insert(h::RETRY_ATTEMPT.into(), plan.attempt.to_string());
    headers
        .entry(h::FIRST_FAILURE_AT.into())
        .or_insert_with(|| Utc::now().to_rfc3339());
    headers
        .entry(h::ORIGINAL_ROUTE.into())
        .or_insert_with(|| msg.routing_key.clone());
    headers.insert(h::LAST_ERROR_CLASS.into(), plan.error_class.as_str().into());
    headers.insert(h::LAST_ERROR_CODE.into(), plan.error_code.clone());
    headers.insert(h::LAST_ERROR.into(), truncate(&plan.error_message, 500));
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Handback;
    use async_trait::async_trait;

    struct Nothing;
    #[async_trait]
    impl Subscriber for Nothing {
        type Delivery = Never;
        async fn next(&mut self, max_wait: Duration) -> crate::Result<Option<Never>> {
            tokio::time::sleep(max_wait.min(Duration::from_millis(5))).await;
            Ok(None)
        }
    }
    struct Never(ReceivedMessage);
    #[async_trait]
    impl Delivery for Never {
        fn message(&self) -> &ReceivedMessage {
            &self.0
        }
        async fn ack(self) -> std::result::Result<(), Handback<Self>> {
            Ok(())
        }
        async fn retry(self, _: &crate::RetryPlan) -> std::result::Result<(), Handback<Self>> {
            Ok(())
        }
        async fn park(self, _: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
            Ok(())
        }
    }
    struct Ok_;
    #[async_trait]
    impl Handler for Ok_ {
        async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
            Ok(Handled::Applied)
        }
    }

    #[tokio::test]
    async fn a_dropped_shutdown_sender_stops_the_loop() {
        let consumer = Consumer::new(
            ConsumerConfig::new("c", EnvelopeDecoder::new()),
            Arc::new(Ok_),
        );
        let (tx, rx) = watch::channel(false);
        drop(tx);
        tokio::time::timeout(Duration::from_secs(2), consumer.run(Nothing, rx))
            .await
            .expect("the loop ends");
    }
}
