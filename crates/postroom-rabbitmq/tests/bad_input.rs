//! Bad input on RabbitMQ, end to end against the broker: a handler that panics, dates and
//! counters at the ends of their ranges, names too long for AMQP, a message without an id,
//! credentials the broker refuses.
//! Each ends in a clear error or a parking with its diagnostics, never a panic, a wrapped
//! number or a message left unsettled.

mod common;

use common::probe::{Mode, Probe, Running, policy, run_probe};
use common::{TestRabbit, order, parked, parking_workload, publish_order};
use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable, LongString};
use postroom_core::outcome::codes;
use postroom_core::{
    Consumer, ConsumerConfig, EnvelopeDecoder, ErrorClass, ErrorKind, Handled, Handler,
    HandlerError, Incoming, MessageId, OutgoingMessage, ParkedMessage, ParkingStore, Publisher,
    RetryPolicy, Route, async_trait,
};
use postroom_rabbitmq::ConfirmingPublisher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// A [`parking_workload`] for `consumer` whose probe fails every delivery transiently, run
/// under `retry` (prefetch 2, one delivery at a time): the workload, its parking store and
/// the store's directory, the publisher, the probe and the running consumer.
async fn failing_transiently(
    consumer: &str,
    retry: RetryPolicy,
) -> (
    TestRabbit,
    Arc<postroom_sqlite::SqliteStore>,
    tempfile::TempDir,
    Arc<ConfirmingPublisher>,
    Arc<Probe>,
    Running,
) {
    let (t, store, dir, publisher) = parking_workload(consumer).await;
    let probe = Probe::new(Mode::Transient);
    let running = run_probe(&t, consumer, 2, &publisher, &probe, retry, 1);
    (t, store, dir, publisher, probe, running)
}

/// Wait (bounded) for exactly one parked message of `consumer`.
async fn parked_one(
    t: &TestRabbit,
    consumer: &str,
    store: &Arc<postroom_sqlite::SqliteStore>,
) -> ParkedMessage {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut found = parked(t, consumer, store).await;
    while found.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing was parked for {consumer} within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        found = parked(t, consumer, store).await;
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// Publish raw bytes with `properties` as a foreign producer would (no postroom publisher).
async fn publish_raw(t: &TestRabbit, key: &str, body: &[u8], properties: BasicProperties) {
    let ch = t.broker.channel().await.expect("channel");
    ch.basic_publish(
        &t.cfg().exchange,
        key,
        BasicPublishOptions::default(),
        body,
        properties.with_delivery_mode(2),
    )
    .await
    .expect("publish")
    .await
    .expect("publish");
    let _ = ch.close(200, "done").await;
}

struct Panicking {
    calls: AtomicU32,
}

#[async_trait]
impl Handler for Panicking {
    async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        panic!("the handler's own bug")
    }
}

/// A handler that panics on every delivery: each panic is an unknown error, retried within
/// the unknown-error budget (one retry here), then parked with its diagnostics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried_within_its_budget_then_parked() {
    let (t, store, _dir, publisher) = parking_workload("hp").await;
    let handler = Arc::new(Panicking {
        calls: AtomicU32::new(0),
    });
    let mut cfg = ConsumerConfig::new("hp", EnvelopeDecoder::new().accept("order.created", 1..=1));
    cfg.retry = policy("1s", 3);
    cfg.retry.max_unknown_retries = 1;
    cfg.version = "test-1".into();
    let consumer = Consumer::new(cfg, handler.clone());
    let (stop, rx) = watch::channel(false);
    let sub = t.subscriber("hp", 2, publisher.clone());
    let task = tokio::spawn(async move { consumer.run(sub, rx).await });
    let env = publish_order(publisher.as_ref(), "hp1").await;

    let p = parked_one(&t, "hp", &store).await;
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.error_class, ErrorClass::Unknown);
    assert_eq!(p.error_code, codes::HANDLER_PANIC);
    assert!(
        p.error_message.contains("the handler's own bug"),
        "{}",
        p.error_message
    );
    assert_eq!(p.attempts, 2, "the first delivery and one retry");
    assert_eq!(handler.calls.load(Ordering::SeqCst), 2);
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the consumer stops: no delivery was left unsettled")
        .unwrap();
}

/// An envelope that occurred at the end of chrono's range, with a maximum age: the deadline
/// cannot be computed by adding, and must not panic. The message is retried or parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_occurred_at_at_the_end_of_time_with_a_max_age_is_parked_not_a_panic() {
    let mut retry = policy("1s", 1);
    retry.max_age = Some(Duration::from_secs(3600));
    let (t, store, _dir, publisher, _probe, running) = failing_transiently("ot", retry).await;
    let mut env = order("ot1", 1);
    env.occurred_at = postroom_core::chrono::DateTime::<postroom_core::chrono::Utc>::MAX_UTC
        - postroom_core::chrono::TimeDelta::seconds(1);
    publisher
        .publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    let p = parked_one(&t, "ot", &store).await;
    assert_eq!(p.message_id, env.id);
    eprintln!(
        "parked with {} {}: {}",
        p.error_class, p.error_code, p.error_message
    );
    running.stop().await;
}

/// `x-retry-attempt` = u32::MAX on arrival: the next attempt number cannot be one more. The
/// budget is spent, so the message is parked, with the count saturated rather than wrapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_attempt_of_u32_max_is_parked_not_wrapped() {
    let (t, store, _dir, publisher, probe, running) =
        failing_transiently("ra", policy("1s", 3)).await;
    let env = order("ra1", 1);
    let mut m = OutgoingMessage::from_envelope(&env, "order.created");
    m.headers
        .insert("x-retry-attempt".into(), u32::MAX.to_string());
    publisher.publish(&m).await.unwrap();
    let p = parked_one(&t, "ra", &store).await;
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.attempts, u32::MAX, "saturated, not wrapped to 0");
    assert_eq!(probe.calls_for(env.id).len(), 1, "never retried");
    assert_eq!(probe.calls_for(env.id)[0].attempt, u32::MAX);
    running.stop().await;
}

/// AMQP short strings (routing keys, exchange names, header names) hold at most 255 bytes.
/// A longer one is refused with a clear error before anything is sent, and the publisher
/// (and its channel) keep working for the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_over_255_bytes_are_refused_with_a_clear_error() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("ln", &["order.#"]).await;
    let publisher = t.publisher();
    let env = order("ln1", 1);
    let long_key = format!("order.{}", "k".repeat(300));
    let err = publisher
        .publish(&OutgoingMessage::from_envelope(&env, long_key.clone()))
        .await
        .expect_err("a 306-byte routing key");
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("255"), "{err}");

    let mut m = OutgoingMessage::from_envelope(&env, "order.created");
    m.headers.insert("h".repeat(256), "v".into());
    let err = publisher
        .publish(&m)
        .await
        .expect_err("a 256-byte header name");
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("header"), "{err}");

    // In a batch only the bad message fails.
    let good = OutgoingMessage::from_envelope(&order("ln2", 1), "order.created");
    let bad = OutgoingMessage {
        route: Route::Topic(long_key),
        ..good.clone()
    };
    let results = publisher.publish_batch(&[bad, good.clone()]).await;
    assert!(results[0].is_err() && results[1].is_ok(), "{results:?}");
    publisher
        .publish(&OutgoingMessage::from_envelope(
            &order("ln3", 1),
            "order.created",
        ))
        .await
        .expect("the publisher still works");
}

/// A message published without a message id (a foreign producer): its retry copy and its
/// parking carry the one id the consumer knows it by (here the envelope's), never a new
/// random one per copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_without_an_id_keeps_one_id_across_retry_and_park() {
    let (t, store, _dir, _publisher, probe, running) =
        failing_transiently("ni", policy("1s", 1)).await;
    let env = order("ni1", 1);
    let mut headers = FieldTable::default();
    headers.insert(
        "x-message-type".into(),
        AMQPValue::LongString(LongString::from("order.created")),
    );
    publish_raw(
        &t,
        "order.created",
        &serde_json::to_vec(&env).unwrap(),
        BasicProperties::default().with_headers(headers),
    )
    .await;
    let p = parked_one(&t, "ni", &store).await;
    let calls = probe.calls_for(env.id);
    assert_eq!(calls.len(), 2, "handled, retried once, then parked");
    assert_eq!(
        p.message_id, env.id,
        "the parking carries the id of the first delivery, not one made up for the retry copy"
    );
    let again: Vec<MessageId> = store
        .get(env.id)
        .await
        .unwrap()
        .iter()
        .map(|p| p.message_id)
        .collect();
    assert_eq!(again, vec![env.id]);
    running.stop().await;
}

/// Credentials the broker refuses: a clear error that names the broker and the user, never the
/// password (neither in its text nor in its debug form).
#[tokio::test]
async fn refused_credentials_give_an_error_without_the_password() {
    let url = common::amqp_url();
    let (scheme, rest) = url.split_once("://").expect("an amqp:// URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let secret = format!("not-the-password-{}", common::rand_suffix());
    let bad = format!("{scheme}://guest:{secret}@{host}");
    let err = postroom_rabbitmq::Broker::connect(&bad)
        .await
        .expect_err("the broker refuses a wrong password");
    let (text, debug) = (err.to_string(), format!("{err:?}"));
    assert!(!text.contains(&secret), "the password leaked: {text}");
    assert!(!debug.contains(&secret), "the password leaked: {debug}");
    assert!(
        text.contains("guest:***@"),
        "names the broker and user: {text}"
    );
}
