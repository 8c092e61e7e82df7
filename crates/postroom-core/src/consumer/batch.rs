//! The batched consumer: many messages per transaction, with the guarantees of the
//! per-message loop.
//!
//! Deliveries go to `concurrency` lanes: by aggregate key with [`Ordering::PerKey`], so one
//! key stays in one lane and in order; otherwise whichever lane is free takes the next run of
//! deliveries as they come, so a batch holds consecutive deliveries (which a transport can
//! acknowledge in one act). Each lane gathers up to
//! `batch_size` deliveries, waiting at most `linger` after the first, and hands the decodable
//! ones to the [`BatchHandler`] in one call (one transaction, one inbox statement). Copies at
//! the crash-loop bound and undecodable bodies are parked on their own first. Acks follow the
//! commit. When the batch transaction fails, the batch is split in halves and each half tried
//! again, down to single messages, so one poison message or one transient failure does not
//! retry or park its neighbours; every message keeps its own retry budget and diagnostics.

use super::breaker::Verdict;
use super::step::{Decision, Screened, Step, guarded};
use super::{ConsumerConfig, Ordering};
use crate::envelope::Envelope;
use crate::failpoint;
use crate::handler::{BatchHandler, Incoming};
use crate::metrics as m;
use crate::outcome::{Disposition, Handled, HandlerError};
use crate::stats::ConsumerStats;
use crate::transport::{Delivery, ReceivedMessage, Subscriber};
use futures::FutureExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Batch settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchConfig {
    /// Most messages per batch (≥ 1).
    pub max_size: usize,
    /// Longest wait for more messages after the first of a batch arrived.
    pub linger: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_size: 64,
            linger: Duration::from_millis(20),
        }
    }
}

/// A consumer whose handler applies batches.
pub struct BatchConsumer<B: ?Sized> {
    step: Step<B>,
    batch: BatchConfig,
}

struct Pulled<D> {
    delivery: D,
    msg: ReceivedMessage,
}

impl<B: BatchHandler + ?Sized> BatchConsumer<B> {
    /// A batched consumer running `handler`: `config.concurrency` batches at once, at most
    /// `batch.max_size` messages each.
    ///
    /// # Panics
    /// When the concurrency or the batch size is 0.
    pub fn new(config: ConsumerConfig, batch: BatchConfig, handler: Arc<B>) -> Self {
        assert!(config.concurrency >= 1, "concurrency must be at least 1");
        assert!(batch.max_size >= 1, "the batch size must be at least 1");
        Self {
            step: Step::new(config, handler),
            batch,
        }
    }

    /// A batched consumer checked against its transport's capabilities (see
    /// [`Consumer::for_transport`](super::Consumer::for_transport)).
    pub fn for_transport(
        config: ConsumerConfig,
        batch: BatchConfig,
        handler: Arc<B>,
        capabilities: &crate::transport::Capabilities,
    ) -> crate::Result<Self> {
        let step = Step::new(config, handler).bound_to(capabilities)?;
        if batch.max_size == 0 {
            return Err(step.refusal(
                crate::ErrorKind::Config,
                "the batch size must be at least 1",
            ));
        }
        Ok(Self { step, batch })
    }

    /// Counters of what this consumer did.
    #[must_use]
    pub fn stats(&self) -> Arc<ConsumerStats> {
        self.step.stats()
    }

    /// Pull and handle in batches until `shutdown` turns true; then stop pulling and let the
    /// lanes finish what they hold.
    pub async fn run<S: Subscriber>(&self, mut subscriber: S, mut shutdown: watch::Receiver<bool>) {
        let cfg = self.step.config.clone();
        let lanes = cfg.concurrency;
        // Per key: a queue per lane. Otherwise one queue that the lanes take turns to gather
        // from (a lane holds it while it gathers a batch).
        let queues = if cfg.ordering == Ordering::PerKey {
            lanes
        } else {
            1
        };
        let mut senders = Vec::with_capacity(queues);
        let mut receivers = Vec::with_capacity(queues);
        for _ in 0..queues {
            let capacity = self.batch.max_size * (lanes / queues);
            let (tx, rx) = mpsc::channel::<Pulled<S::Delivery>>(capacity.max(1));
            senders.push(tx);
            receivers.push(Arc::new(tokio::sync::Mutex::new(rx)));
        }
        let mut workers = Vec::with_capacity(lanes);
        for lane in 0..lanes {
            let lane_worker = Lane {
                step: self.step.clone(),
                batch: self.batch,
            };
            workers.push(tokio::spawn(
                lane_worker.run(receivers[lane % queues].clone()),
            ));
        }
        drop(receivers);
        let mut backoff =
            crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let breaker = self.step.breaker.clone();
        let mut keyless = 0usize;
        loop {
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                break;
            }
            metrics::gauge!(m::BREAKER_OPEN, "consumer" => cfg.name.clone())
                .set(if breaker.is_open() { 1.0 } else { 0.0 });
            if let super::breaker::Admission::Wait(pause) = breaker.admit() {
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            // Never cancelled: see the per-message loop.
            let next = subscriber.next(Duration::from_millis(500)).await;
            breaker.pulled(matches!(next, Ok(Some(_))));
            match next {
                Ok(Some(delivery)) => {
                    backoff.reset();
                    let msg = delivery.message().clone();
                    let queue = match (queues, msg.ordering_key()) {
                        (1, _) => 0,
                        (_, Some(key)) => lane_of(key, lanes),
                        (_, None) => {
                            keyless = (keyless + 1) % lanes;
                            keyless
                        }
                    };
                    // Waits while the queue is full: backpressure on the transport.
                    if senders[queue].send(Pulled { delivery, msg }).await.is_err() {
                        tracing::error!(consumer = %cfg.name, "a batch lane stopped");
                        break;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    let d = backoff.next_delay();
                    tracing::warn!(consumer = %cfg.name, error = %e, retry_in_ms = d.as_millis() as u64, "receive failed");
                    tokio::time::sleep(d).await;
                }
            }
        }
        drop(senders);
        for w in workers {
            if let Err(e) = w.await {
                tracing::error!(consumer = %cfg.name, error = %e, "a batch lane ended with a panic");
            }
        }
        subscriber.close().await;
    }
}

fn lane_of(key: &str, lanes: usize) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() % lanes as u64) as usize
}

struct Lane<B: ?Sized> {
    step: Step<B>,
    batch: BatchConfig,
}

impl<B: BatchHandler + ?Sized> Lane<B> {
    async fn run<D: Delivery>(self, queue: Arc<tokio::sync::Mutex<mpsc::Receiver<Pulled<D>>>>) {
        loop {
            let batch = {
                let mut rx = queue.lock().await;
                let Some(first) = rx.recv().await else { break };
                let mut batch = vec![first];
                let deadline = tokio::time::Instant::now() + self.batch.linger;
                while batch.len() < self.batch.max_size {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(p)) => batch.push(p),
                        Ok(None) | Err(_) => break,
                    }
                }
                batch
            };
            self.process(batch).await;
        }
    }

    /// Park what cannot be handled, handle the rest as a batch, settle every delivery. The
    /// deliveries of a batch are settled at once, not one after another: the acks go out
    /// together and the retry and park publishes share their confirm waits.
    async fn process<D: Delivery>(&self, batch: Vec<Pulled<D>>) {
        let mut settled: Vec<(Pulled<D>, Decision)> = Vec::with_capacity(batch.len());
        let mut ready: Vec<(Pulled<D>, Envelope, Verdict)> = Vec::with_capacity(batch.len());
        for p in batch {
            match self.step.screen(&p.msg) {
                Screened::Park { reason, envelope } => {
                    let decision = Decision {
                        disposition: Disposition::Park(reason),
                        envelope,
                    };
                    settled.push((p, decision));
                }
                Screened::Handle { envelope, verdict } => ready.push((p, envelope, verdict)),
            }
        }
        if !ready.is_empty() {
            let incoming: Vec<Incoming> = ready
                .iter()
                .map(|(p, e, _)| Incoming {
                    envelope: e.clone(),
                    attempt: p.msg.attempt(),
                    redelivered: p.msg.redelivered,
                    routing_key: p.msg.routing_key.clone(),
                    headers: p.msg.headers.clone(),
                })
                .collect();
            let results = self.handle_split(&incoming).await;
            let committed = results.iter().any(Result::is_ok);
            if committed {
                failpoint::hit(failpoint::BATCH_AFTER_COMMIT, &self.step.config.name).await;
            }
            for ((p, envelope, verdict), result) in ready.into_iter().zip(results) {
                let attempt = p.msg.attempt();
                let disposition = self.step.classify(result, attempt, &envelope, verdict);
                let decision = Decision {
                    disposition,
                    envelope: Some(envelope),
                };
                settled.push((p, decision));
            }
        }
        // Retries and parks first (each acks its original once its copy is confirmed), then
        // the acks of the batch together: with no unsettled delivery left among them, a
        // transport that acknowledges runs (AMQP `multiple`) covers the batch in one act.
        let (acks, others): (Vec<_>, Vec<_>) = settled
            .into_iter()
            .partition(|(_, d)| matches!(d.disposition, Disposition::Ack));
        futures::future::join_all(others.into_iter().map(
            |(Pulled { delivery, msg }, decision)| async move {
                self.step.settle(delivery, &msg, decision).await;
            },
        ))
        .await;
        let acks = acks.into_iter().map(|(p, _)| p.delivery).collect();
        self.step.settle_acks(acks).await;
    }

    /// Results for `batch`, one per message: the handler's, or — when its transaction failed —
    /// those of the two halves tried again, down to single messages.
    fn handle_split<'a>(
        &'a self,
        batch: &'a [Incoming],
    ) -> futures::future::BoxFuture<'a, Vec<Result<Handled, HandlerError>>> {
        async move {
            match self.call(batch).await {
                Ok(results) if results.len() == batch.len() => results,
                Ok(results) => {
                    let e = HandlerError::permanent(
                        "batch_result_mismatch",
                        format!(
                            "the batch handler returned {} results for {} messages",
                            results.len(),
                            batch.len()
                        ),
                    );
                    tracing::error!(error = %e, "batch handler broke its contract");
                    batch.iter().map(|_| Err(e.clone())).collect()
                }
                Err(e) if batch.len() == 1 => vec![Err(e)],
                Err(e) => {
                    tracing::info!(size = batch.len(), error = %e, "batch failed: splitting it to isolate the failure");
                    metrics::counter!(m::BATCH_SPLITS, "consumer" => self.step.config.name.clone())
                        .increment(1);
                    let (left, right) = batch.split_at(batch.len() / 2);
                    let mut out = self.handle_split(left).await;
                    out.extend(self.handle_split(right).await);
                    out
                }
            }
        }
        .boxed()
    }

    async fn call(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError> {
        let cfg = &self.step.config;
        let started = std::time::Instant::now();
        let r = guarded(cfg, "batch handler", self.step.handler.handle_batch(batch)).await;
        metrics::histogram!(m::BATCH_SECONDS, "consumer" => cfg.name.clone())
            .record(started.elapsed().as_secs_f64());
        metrics::histogram!(m::BATCH_SIZE, "consumer" => cfg.name.clone())
            .record(batch.len() as f64);
        r
    }
}
