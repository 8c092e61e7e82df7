//! A handler that records the order it sees records in, fails chosen (key, version) pairs a
//! number of times, and can keep each key's state with the version guard; plus a consumer run
//! on a Kafka transport with per-key dispatch.
#![allow(dead_code)]

use postroom_core::ordering::{VersionDecision, check_version};
use postroom_core::{
    Consumer, ConsumerConfig, Envelope, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming,
    Ordering, OutgoingMessage, RetryPolicy, Subscription, Transport,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// One handler call.
#[derive(Clone, Debug)]
pub struct Seen {
    pub key: String,
    pub version: u64,
    pub attempt: u32,
    pub at: Instant,
    pub wall: SystemTime,
    pub headers: postroom_core::Headers,
    pub ok: bool,
}

/// Records calls; fails `(key, version)` on its first `n` attempts; with `guard`, applies
/// versions only in order (a gap is a transient error).
pub struct OrderedHandler {
    failures: HashMap<(String, u64), u32>,
    guard: bool,
    last: Mutex<HashMap<String, u64>>,
    pub seen: Mutex<Vec<Seen>>,
    pub applied: Mutex<Vec<(String, u64)>>,
    pub gaps: Mutex<u32>,
}

impl OrderedHandler {
    pub fn new(failures: &[(&str, u64, u32)], guard: bool) -> Arc<Self> {
        Arc::new(Self {
            failures: failures
                .iter()
                .map(|(k, v, n)| (((*k).to_string(), *v), *n))
                .collect(),
            guard,
            last: Mutex::new(HashMap::new()),
            seen: Mutex::new(Vec::new()),
            applied: Mutex::new(Vec::new()),
            gaps: Mutex::new(0),
        })
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Versions of `key` in the order the handler saw them (every call).
    pub fn calls_of(&self, key: &str) -> Vec<(u64, u32)> {
        self.seen()
            .iter()
            .filter(|s| s.key == key)
            .map(|s| (s.version, s.attempt))
            .collect()
    }

    /// How many records the handler applied, of every key.
    pub fn applied_count(&self) -> usize {
        self.applied.lock().unwrap().len()
    }

    pub fn applied_of(&self, key: &str) -> Vec<u64> {
        self.applied
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| *v)
            .collect()
    }
}

#[postroom_core::async_trait]
impl Handler for OrderedHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let key = m.envelope.aggregate.id.clone();
        let version = m.envelope.aggregate.version;
        let fail = self
            .failures
            .get(&(key.clone(), version))
            .is_some_and(|n| m.attempt < *n);
        let mut seen = Seen {
            key: key.clone(),
            version,
            attempt: m.attempt,
            at: Instant::now(),
            wall: SystemTime::now(),
            headers: m.headers.clone(),
            ok: false,
        };
        if fail {
            self.seen.lock().unwrap().push(seen);
            return Err(HandlerError::transient("dependency_down", "injected"));
        }
        if self.guard {
            let mut last = self.last.lock().unwrap();
            match check_version(last.get(&key).copied(), version, 1) {
                VersionDecision::Apply => {
                    last.insert(key.clone(), version);
                }
                VersionDecision::AlreadyApplied => {
                    seen.ok = true;
                    self.seen.lock().unwrap().push(seen);
                    return Ok(Handled::Duplicate);
                }
                gap @ VersionDecision::Gap { .. } => {
                    *self.gaps.lock().unwrap() += 1;
                    self.seen.lock().unwrap().push(seen);
                    return Err(gap.gap_error(&key).expect("a gap"));
                }
            }
        }
        seen.ok = true;
        self.seen.lock().unwrap().push(seen);
        self.applied.lock().unwrap().push((key, version));
        Ok(Handled::Applied)
    }
}

/// An `order.created` envelope of aggregate `key` at `version`.
pub fn event(key: &str, version: u64) -> Envelope {
    Envelope::builder("order.created", "ordering-test")
        .aggregate("order", key, version)
        .build()
}

/// Publish `events` to `topic`, in order, each confirmed before the next.
pub async fn publish_in_order(transport: &dyn Transport, topic: &str, events: &[Envelope]) {
    let publisher = transport.publisher();
    for e in events {
        publisher
            .publish(&OutgoingMessage::from_envelope(e, topic))
            .await
            .expect("publish");
    }
}

/// A running consumer.
pub struct Running {
    pub stop: watch::Sender<bool>,
    pub task: tokio::task::JoinHandle<postroom_core::Result<()>>,
}

impl Running {
    /// Ask the consumer to stop and wait for it: a consumer that does not stop within 30 s,
    /// panicked, or ended with an error fails the test.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        match tokio::time::timeout(Duration::from_secs(30), self.task).await {
            Err(_) => panic!("the consumer task did not stop within 30 s"),
            Ok(Err(e)) => panic!("the consumer task panicked: {e}"),
            Ok(Ok(Err(e))) => panic!("the consumer task ended with an error: {e}"),
            Ok(Ok(Ok(()))) => {}
        }
    }

    /// Kill the consumer: its task is dropped mid-flight, nothing settles; returns once it is
    /// gone (its consumer left the group: on tansu, a member joining while another leaves
    /// can stall the group's rebalance).
    pub async fn kill(self) {
        self.task.abort();
        match tokio::time::timeout(Duration::from_secs(30), self.task).await {
            Err(_) => panic!("the killed consumer task was not gone within 30 s"),
            Ok(Err(e)) if e.is_cancelled() => {}
            Ok(Err(e)) => panic!("the consumer task panicked before it was killed: {e}"),
            Ok(Ok(Err(e))) => {
                panic!("the consumer task ended with an error before it was killed: {e}")
            }
            Ok(Ok(Ok(()))) => panic!("the consumer task ended by itself before it was killed"),
        }
    }
}

/// Run `handler` as consumer `name` on `topics` with per-key dispatch, `concurrency` at once;
/// the topics exist (with the transport's partitions) when this returns.
pub async fn run(
    transport: Arc<dyn Transport>,
    name: &str,
    topics: &[&str],
    handler: Arc<dyn Handler>,
    retry: RetryPolicy,
    concurrency: usize,
) -> Running {
    let decoder = EnvelopeDecoder::new().accept("order.created", 1..=1);
    let mut cfg = ConsumerConfig::new(name, decoder);
    cfg.retry = retry;
    cfg.concurrency = concurrency;
    cfg.ordering = Ordering::PerKey;
    cfg.breaker.failure_threshold = 0;
    let consumer = Consumer::for_transport(cfg, handler, &transport.capabilities())
        .expect("the transport keeps the consumer's settings");
    let sub = Subscription::new(name, topics).prefetch(concurrency * 2);
    transport.bind(&sub).await.expect("bind");
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move { consumer.run_on(transport.as_ref(), &sub, rx).await });
    Running { stop, task }
}

/// [`run`] on the topic `orders`: a per-key consumer `name` of it on `t`.
pub async fn on_orders(
    t: &Arc<dyn Transport>,
    name: &str,
    handler: Arc<dyn Handler>,
    retry: RetryPolicy,
    concurrency: usize,
) -> Running {
    run(t.clone(), name, &["orders"], handler, retry, concurrency).await
}

/// A retry policy over a ladder with a number of retries, no jitter, no deadline.
#[allow(unused_imports)]
pub use postroom_testkit::probe::policy as retries;

/// Poll a condition until it holds or a bound passes.
#[allow(unused_imports)]
pub use postroom_testkit::wait::eventually_holds as wait_until;
