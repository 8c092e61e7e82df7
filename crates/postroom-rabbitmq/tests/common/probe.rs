//! A handler for transport tests: fails on demand and records every call.

use postroom_core::{
    Consumer, ConsumerConfig, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming, MessageId,
    RetryPolicy,
};
use postroom_rabbitmq::RabbitSubscriber;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// What the probe does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Succeed.
    Ok,
    /// Fail transiently while the attempt is below this.
    FailBelow(u32),
    /// Always fail transiently.
    Transient,
    /// Always fail permanently.
    Permanent,
}

/// One call.
#[derive(Clone, Debug)]
pub struct Call {
    pub id: MessageId,
    pub attempt: u32,
    pub at: Instant,
    pub version: u64,
    pub key: String,
}

/// The probe handler.
pub struct Probe {
    mode: Mutex<Mode>,
    calls: Mutex<Vec<Call>>,
}

impl Probe {
    pub fn new(mode: Mode) -> Arc<Self> {
        Arc::new(Self {
            mode: Mutex::new(mode),
            calls: Mutex::new(Vec::new()),
        })
    }
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
    pub fn calls_for(&self, id: MessageId) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.id == id).collect()
    }
}

#[postroom_core::async_trait]
impl Handler for Probe {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let e = &m.envelope;
        self.calls.lock().unwrap().push(Call {
            id: e.id,
            attempt: m.attempt,
            at: Instant::now(),
            version: e.aggregate.version,
            key: e.aggregate.key(),
        });
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Ok => Ok(Handled::Applied),
            Mode::FailBelow(n) if m.attempt < n => {
                Err(HandlerError::transient("dependency_down", "injected"))
            }
            Mode::FailBelow(_) => Ok(Handled::Applied),
            Mode::Transient => Err(HandlerError::transient(
                "dependency_down",
                "injected: never recovers",
            )),
            Mode::Permanent => Err(HandlerError::permanent(
                "rejected_by_test",
                "injected permanent failure",
            )),
        }
    }
}

/// A consumer running in the background.
pub struct Running {
    pub stop: watch::Sender<bool>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Graceful stop (the subscriber and its channel go away: unacked deliveries return).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), self.task).await;
    }
}

/// Run the core consumer loop on `sub` with `handler`.
pub fn run(
    sub: RabbitSubscriber,
    name: &str,
    handler: Arc<Probe>,
    retry: RetryPolicy,
    concurrency: usize,
) -> Running {
    let mut cfg = ConsumerConfig::new(name, EnvelopeDecoder::new().accept("order.created", 1..=1));
    cfg.retry = retry;
    cfg.version = "test-1".into();
    cfg.concurrency = concurrency;
    cfg.breaker.failure_threshold = 0;
    let consumer = Consumer::new(cfg, handler);
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move { consumer.run(sub, rx).await });
    Running { stop, task }
}

/// A policy on `ladder` with `retries` retries, no deadline and no jitter.
pub fn policy(ladder: &str, retries: u32) -> RetryPolicy {
    RetryPolicy {
        ladder: ladder.parse().unwrap(),
        max_retries: retries,
        max_unknown_retries: 1,
        max_age: None,
        jitter: 0.0,
    }
}
