//! The conformance cases, by theme. Each takes a fresh backend and asserts on committed
//! effects, parked records and handler calls; none asserts on timing other than "never
//! earlier than".

pub mod batch;
#[cfg(all(feature = "postgres", feature = "own-servers"))]
pub mod breaker;
pub mod crash_loop;
#[cfg(all(feature = "postgres", feature = "sqlite"))]
pub mod database_outage;
pub mod delivery;
pub mod errors;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod inbox;
pub mod redrive;
pub mod relay;
pub mod retry;
pub mod table_queue_redrive;
#[cfg(all(feature = "postgres", feature = "own-servers"))]
pub mod wal;

pub use batch::*;
pub use delivery::*;
pub use errors::*;
pub use redrive::*;
pub use relay::*;
pub use retry::*;

use crate::effect::EffectHandler;
use crate::fixture::Backend;
use crate::recording::{Recorder, RecordingSubscriber};
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::stats::StatsSnapshot;
use postroom_core::{
    Envelope, EnvelopeDecoder, OutboxRelay, ParkingFilter, RelayConfig, RetryPolicy,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A unique name for this test's consumer / topic.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    )
}

/// An `order.created` envelope for aggregate `id` at `version`.
pub fn order(id: &str, version: u64) -> Envelope {
    Envelope::builder("order.created", "conformance")
        .aggregate("order", id, version)
        .correlation_id(format!("corr-{id}"))
        .data(serde_json::json!({"order_id": id, "version": version}))
        .build()
}

/// A message of the raw bytes `body` (an envelope or not) to the topic `topic`, with a new id
/// and no headers.
pub fn raw_message(topic: &str, body: impl Into<Vec<u8>>) -> postroom_core::OutgoingMessage {
    postroom_core::OutgoingMessage {
        id: postroom_core::MessageId::new(),
        route: postroom_core::Route::Topic(topic.into()),
        headers: postroom_core::Headers::new(),
        body: body.into(),
    }
}

/// Publish with `publisher`, for each of `versions` in turn, an [`order`] of every one of
/// `aggregates` at that version (to `order.created`).
pub async fn publish_versions<P: postroom_core::Publisher + ?Sized>(
    publisher: &P,
    aggregates: &[&str],
    versions: std::ops::RangeInclusive<u64>,
) {
    for v in versions {
        for a in aggregates {
            let message =
                postroom_core::OutgoingMessage::from_envelope(&order(a, v), "order.created");
            publisher.publish(&message).await.expect("publish");
        }
    }
}

/// Publish `envelope` to `topic` with `publisher`; the broker must confirm it.
pub async fn publish_to(
    publisher: std::sync::Arc<dyn postroom_core::Publisher>,
    envelope: &Envelope,
    topic: &str,
) {
    let message = postroom_core::OutgoingMessage::from_envelope(envelope, topic);
    publisher.publish(&message).await.expect("publish");
}

/// Fail the test, saying `what` was lost, unless every id of `expected` is in `got`.
pub fn assert_none_lost(
    expected: &std::collections::BTreeSet<postroom_core::MessageId>,
    got: &std::collections::BTreeSet<postroom_core::MessageId>,
    what: &str,
) {
    let lost: Vec<_> = expected.difference(got).collect();
    assert!(lost.is_empty(), "{what}: {lost:?}");
}

/// Publish `messages` with `publisher` in one batch; every one of them must be confirmed.
pub async fn publish_all<P: postroom_core::Publisher + ?Sized>(
    publisher: &P,
    messages: &[postroom_core::OutgoingMessage],
) {
    let results = publisher.publish_batch(messages).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// The [`order`] `id` at version 1, written to `b`'s outbox for `topic` and relayed (the
/// outbox drained by relay `r1`).
pub async fn produce_and_relay(b: &Arc<Backend>, topic: &str, id: &str) -> Envelope {
    let env = order(id, 1);
    b.produce(&env, topic).await.unwrap();
    relay_all(b, "r1").await;
    env
}

/// The effect key the suite's handler applies for `e` (one counter per aggregate).
pub fn effect_key(e: &Envelope) -> String {
    format!("effect:{}", e.aggregate.id)
}

/// How many times `e`'s effect was applied for consumer `c`.
pub async fn effect_of(b: &Backend, c: &str, e: &Envelope) -> u64 {
    b.effect_count(c, &effect_key(e)).await.unwrap()
}

/// How many effects of `envs` were applied for consumer `c`, summed.
pub async fn effects_of(b: &Backend, c: &str, envs: &[Envelope]) -> u64 {
    let mut n = 0;
    for e in envs {
        n += effect_of(b, c, e).await;
    }
    n
}

/// The suite's retry policy for `backend`: its ladder, one retry per stage, no deadline.
pub fn policy(b: &Backend) -> RetryPolicy {
    let ladder = b.caps().ladder;
    RetryPolicy {
        max_retries: ladder.len() as u32,
        max_unknown_retries: 1,
        max_age: None,
        jitter: 0.1,
        ladder,
    }
}

/// A consumer running in the background, with what happened to each delivery.
pub struct Running {
    consumer: crate::running::Running,
    recorder: Arc<Recorder>,
}

impl Running {
    /// `consumer` with its deliveries recorded by `recorder`.
    pub(crate) fn new(consumer: crate::running::Running, recorder: Arc<Recorder>) -> Self {
        Self { consumer, recorder }
    }

    /// Counters so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.consumer.stats.snapshot()
    }

    /// What happened to each delivery (receive and retry times).
    pub fn recorder(&self) -> Arc<Recorder> {
        self.recorder.clone()
    }

    /// Graceful stop: the loop must end within 30 s without panicking.
    pub async fn stop(self) -> StatsSnapshot {
        self.consumer.stop().await
    }
}

/// A case's consumer: named after `case` (made unique), on a topic of its own, its handler
/// applying effects with `fault`, under the suite's retry policy. Returns the consumer's
/// name, the topic, the handler and the running consumer.
pub async fn consume(
    b: &Arc<Backend>,
    case: &str,
    fault: crate::effect::Fault,
) -> (String, String, Arc<EffectHandler>, Running) {
    let (c, topic) = (unique(case), unique(&format!("t.{case}.")));
    let h = EffectHandler::new(b.clone(), &c, fault);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b)).await;
    (c, topic, h, run)
}

/// Start a consumer named `name` on `topics` with `handler` and `retry`.
pub async fn start_consumer(
    b: &Arc<Backend>,
    name: &str,
    topics: &[&str],
    handler: Arc<EffectHandler>,
    retry: RetryPolicy,
) -> Running {
    start_consumer_with(b, name, topics, handler, retry, |_| {}).await
}

/// [`start_consumer`] with a last word on the consumer's settings.
pub async fn start_consumer_with(
    b: &Arc<Backend>,
    name: &str,
    topics: &[&str],
    handler: Arc<EffectHandler>,
    retry: RetryPolicy,
    adjust: impl FnOnce(&mut ConsumerConfig),
) -> Running {
    let (sub, mut cfg, recorder) = suite_setup(b, name, topics, retry).await;
    cfg.concurrency = 1;
    adjust(&mut cfg);
    let consumer = Consumer::for_transport(cfg, handler, &b.transport().capabilities())
        .expect("the transport keeps the suite's consumer settings");
    Running::new(crate::running::spawn(consumer, sub), recorder)
}

/// What every consumer of the suite starts from: `name` subscribed to `topics` with its
/// deliveries recorded, the suite's decoder and version, `retry`, no breaker, and a handler
/// timeout well within the transport's lease (or it refuses the consumer).
pub(crate) async fn suite_setup(
    b: &Arc<Backend>,
    name: &str,
    topics: &[&str],
    retry: RetryPolicy,
) -> (RecordingSubscriber, ConsumerConfig, Arc<Recorder>) {
    suite_setup_with_prefetch(b, name, topics, retry, None).await
}

/// [`suite_setup`] with a prefetch of its own (`None`: the fixture's).
pub(crate) async fn suite_setup_with_prefetch(
    b: &Arc<Backend>,
    name: &str,
    topics: &[&str],
    retry: RetryPolicy,
    prefetch: Option<usize>,
) -> (RecordingSubscriber, ConsumerConfig, Arc<Recorder>) {
    let caps = b.transport().capabilities();
    let recorder = Arc::new(Recorder::default());
    let subscriber = match prefetch {
        Some(n) => b.subscribe_with_prefetch(name, topics, n).await,
        None => b.subscribe(name, topics).await,
    };
    let sub = RecordingSubscriber::new(
        subscriber.expect("subscribe"),
        recorder.clone(),
        caps.delay.is_staged(),
    );
    let decoder = EnvelopeDecoder::new().accept("order.created", 1..=1);
    let mut cfg = ConsumerConfig::new(name, decoder);
    cfg.retry = retry;
    cfg.version = "conformance-1".into();
    cfg.breaker.failure_threshold = 0;
    if let Some(owned) = caps.ownership {
        cfg.handler_timeout = owned.mul_f64(0.75);
    }
    (sub, cfg, recorder)
}

/// A relay from `b`'s outbox to its publisher, with `config`.
pub fn relay_on(
    b: &Backend,
    config: RelayConfig,
) -> OutboxRelay<dyn postroom_core::OutboxStore, dyn postroom_core::Publisher> {
    OutboxRelay::new(b.outbox(), b.publisher(), config)
}

/// Run relay passes until the outbox is empty.
pub async fn relay_all(b: &Arc<Backend>, relay_id: &str) {
    let relay = relay_on(
        b,
        RelayConfig {
            relay_id: relay_id.into(),
            ..RelayConfig::default()
        },
    );
    for _ in 0..1000 {
        let pass = relay.run_once().await.expect("relay pass");
        if pass.claimed == 0 && b.outbox().pending().await.expect("pending") == 0 {
            return;
        }
        if pass.claimed == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("outbox did not drain");
}

pub use crate::wait::{eventually as wait_for, until};

/// Wait up to 20 s until consumer `c` reached the crash point `point` (failing the test,
/// saying `what` was awaited, otherwise).
pub async fn until_reached(point: &'static str, c: &str, what: &str) {
    until(Duration::from_secs(20), what, || async {
        postroom_core::failpoint::hits(point, c) >= 1
    })
    .await;
}

/// Every parked record of `consumer`, redriven ones included.
pub async fn parked_of(b: &Arc<Backend>, consumer: &str) -> Vec<postroom_core::ParkedMessage> {
    let f = ParkingFilter {
        consumer: Some(consumer.into()),
        include_redriven: true,
        ..ParkingFilter::default()
    };
    b.parking().search(&f, 1000).await.expect("parking search")
}

/// Assert that `p` was parked with the error code `code` after `attempts` deliveries, and
/// that its error message mentions `says`.
pub fn assert_parked_for(p: &postroom_core::ParkedMessage, code: &str, attempts: u32, says: &str) {
    assert_eq!(
        (p.error_code.as_str(), p.attempts),
        (code, attempts),
        "error code and attempts of the record parked for {}",
        p.message_id
    );
    assert!(p.error_message.contains(says), "{}", p.error_message);
}

/// Wait up to `within` until `count` messages of `consumer` are parked (failing the test with
/// `what` otherwise), and return them.
pub async fn wait_parked(
    b: &Arc<Backend>,
    consumer: &str,
    count: usize,
    within: Duration,
    what: &str,
) -> Vec<postroom_core::ParkedMessage> {
    assert!(
        wait_for(within, || async {
            parked_of(b, consumer).await.len() >= count
        })
        .await,
        "{what}: {} of {count} parked within {within:?}",
        parked_of(b, consumer).await.len()
    );
    let parked = parked_of(b, consumer).await;
    assert_eq!(parked.len(), count, "{what}: {parked:?}");
    parked
}

/// The sum of the suite ladder's delays.
pub fn ladder_total(b: &Backend) -> Duration {
    b.caps().ladder.delays().iter().sum::<Duration>()
}

/// How long a case waits for a message to walk the whole of the suite's ladder: twice its
/// delays, and 20 s more.
pub fn ladder_walk(b: &Backend) -> Duration {
    ladder_total(b) * 2 + Duration::from_secs(20)
}

/// The next delivery of `sub` within `total`, or `None`.
pub async fn next_within<S: postroom_core::Subscriber>(
    sub: &mut S,
    total: Duration,
) -> Option<S::Delivery> {
    let deadline = Instant::now() + total;
    while Instant::now() < deadline {
        if let Some(d) = sub.next(Duration::from_millis(250)).await.expect("receive") {
            return Some(d);
        }
    }
    None
}

/// The next delivery of `sub` within 20 s, or `None`.
pub async fn wait_next<S: postroom_core::Subscriber>(sub: &mut S) -> Option<S::Delivery> {
    next_within(sub, Duration::from_secs(20)).await
}
