//! The three retry ordering policies on Kafka, each with a test that fails when the order it
//! promises is broken (all records share one partition, so any overtaking is the policy's);
//! and on topics of three partitions, on both test brokers, that a key's records all go to
//! one partition, keys spread over several, and each key is applied in order while the
//! partitions run in parallel.

mod common;

use common::TestKafka;
use common::ordered::{
    OrderedHandler, Running, event, on_orders, publish_in_order, retries, wait_until,
};
use postroom_core::{Envelope, Transport};
use postroom_kafka::{KafkaTransport, RetryOrdering};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every record of `topic` (all its partitions, from the start): (key, partition) in the
/// order of each partition's offsets, read until `count` are in.
fn records_by_partition(kafka: &TestKafka, topic: &str, count: usize) -> Vec<(String, i32)> {
    let mut c = kafka.config.client_config();
    c.set("group.id", format!("{topic}.reader"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    let reader: BaseConsumer = c.create().expect("reader");
    reader.subscribe(&[topic]).expect("subscribe");
    let mut out = Vec::new();
    let end = Instant::now() + Duration::from_secs(40);
    while out.len() < count && Instant::now() < end {
        if let Some(Ok(m)) = reader.poll(Duration::from_millis(200)) {
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
            out.push((key, m.partition()));
        }
    }
    assert_eq!(out.len(), count, "every record of {topic} read back");
    out
}

/// Keys to partitions: each key on exactly one partition, and several partitions used.
fn assert_keys_route_to_one_partition_each(records: &[(String, i32)], partitions: i32) {
    let mut of_key: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
    for (k, p) in records {
        of_key.entry(k).or_default().insert(*p);
    }
    for (k, ps) in &of_key {
        assert_eq!(ps.len(), 1, "key {k} went to partitions {ps:?}");
    }
    let used: BTreeSet<i32> = of_key.values().flatten().copied().collect();
    assert!(
        used.len() >= 2 && used.iter().all(|p| (0..partitions).contains(p)),
        "keys spread over several of the {partitions} partitions: {used:?}"
    );
}

/// Twelve keys of five versions each, published interleaved to a topic of three partitions,
/// and a per-key consumer running 8 at once: the records of a key are all on one partition,
/// in version order, the keys spread over the partitions, and each key is applied in order.
async fn keys_keep_their_partition_and_their_order(kafka: TestKafka) {
    let t = kafka.transport(kafka.config.clone().partitions(3));
    let h = OrderedHandler::new(&[], true);
    let run = on_orders(&t, "spread", h.clone(), retries("1s", 3), 8).await;
    let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    let mut events = Vec::new();
    for v in 1..=5 {
        for k in &keys {
            events.push(event(k, v));
        }
    }
    publish_and_apply_all(t.as_ref(), &h, run, &events).await;
    let records = records_by_partition(&kafka, &format!("{}.orders", kafka.prefix), events.len());
    assert_keys_route_to_one_partition_each(&records, 3);
    for k in &keys {
        assert_eq!(
            h.applied_of(k),
            vec![1, 2, 3, 4, 5],
            "key {k} applied in order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_keep_their_partition_and_their_order_on_tansu() {
    keys_keep_their_partition_and_their_order(TestKafka::new("1s")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_keep_their_partition_and_their_order_on_the_mock_cluster() {
    keys_keep_their_partition_and_their_order(TestKafka::on_mock("1s")).await;
}

/// The routing check can fail: records of one key on two partitions are refused.
#[test]
#[should_panic(expected = "key a went to partitions")]
fn the_routing_check_refuses_a_key_on_two_partitions() {
    assert_keys_route_to_one_partition_each(
        &[("a".into(), 0), ("a".into(), 1), ("b".into(), 2)],
        3,
    );
}

/// Stopping a consumer asserts how its task ended: one that panicked fails the test.
#[tokio::test]
#[should_panic(expected = "the consumer task panicked")]
async fn stopping_a_consumer_whose_task_panicked_fails() {
    let (stop, _rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async { panic!("the consumer loop died") });
    Running { stop, task }.stop().await;
}

/// A one-partition workload on `ladder` with the retry ordering `ordering`, and on it a
/// per-key consumer `name` of `orders` running `h` (4 at once), retried up to `retries` times
/// on that ladder. The workload's topics go with the returned `TestKafka`.
async fn consume_orders(
    ordering: RetryOrdering,
    ladder: &str,
    retries_on_it: u32,
    name: &str,
    h: &Arc<OrderedHandler>,
) -> (TestKafka, Arc<dyn Transport>, Running) {
    let kafka = TestKafka::new(ladder);
    let config = kafka.config.clone().partitions(1).ordering(ordering);
    let t: Arc<dyn Transport> = Arc::new(KafkaTransport::new(config).expect("transport"));
    let run = on_orders(&t, name, h.clone(), retries(ladder, retries_on_it), 4).await;
    (kafka, t, run)
}

/// Publish `events` to `orders` in order and stop `run` once `h` applied every one of them,
/// failing the test when that takes more than 40 s.
async fn publish_and_apply_all(
    t: &dyn Transport,
    h: &OrderedHandler,
    run: Running,
    events: &[Envelope],
) {
    publish_in_order(t, "orders", events).await;
    assert!(
        wait_until(Duration::from_secs(40), || h.applied_count()
            == events.len())
        .await,
        "all applied: {:?}",
        h.seen()
    );
    run.stop().await;
}

/// Default: a failed record goes to a retry topic and later versions of its key overtake it;
/// the version guard defers them (a gap is transient) so the state is still applied in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_topics_keep_order_through_the_version_guard() {
    let h = OrderedHandler::new(&[("a", 1, 1)], true);
    let (_kafka, t, run) =
        consume_orders(RetryOrdering::RetryTopics, "1s,2s", 6, "guarded", &h).await;
    publish_in_order(
        t.as_ref(),
        "orders",
        &[event("a", 1), event("a", 2), event("a", 3)],
    )
    .await;
    assert!(
        wait_until(Duration::from_secs(40), || h.applied_of("a").len() == 3).await,
        "every version applied: {:?}",
        h.calls_of("a")
    );
    run.stop().await;
    assert_eq!(h.applied_of("a"), vec![1, 2, 3], "applied in version order");
    assert!(
        *h.gaps.lock().unwrap() >= 1,
        "a later version overtook the retried one and was deferred by the guard: {:?}",
        h.calls_of("a")
    );
}

/// Blocking: the partition does not advance until the failed record succeeds; every record
/// behind it, of any key, waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_mode_holds_the_partition_until_the_failed_record_succeeds() {
    let h = OrderedHandler::new(&[("a", 1, 2)], false);
    let (_kafka, t, run) = consume_orders(RetryOrdering::Blocking, "1s", 5, "blocking", &h).await;
    let events = [event("a", 1), event("b", 1), event("a", 2), event("b", 2)];
    publish_and_apply_all(t.as_ref(), &h, run, &events).await;
    let order: Vec<(String, u64, u32)> = h
        .seen()
        .iter()
        .map(|s| (s.key.clone(), s.version, s.attempt))
        .collect();
    assert_eq!(
        order,
        vec![
            ("a".into(), 1, 0),
            ("a".into(), 1, 1),
            ("a".into(), 1, 2),
            ("b".into(), 1, 0),
            ("a".into(), 2, 0),
            ("b".into(), 2, 0),
        ],
        "nothing behind the failed record ran before it succeeded"
    );
    let a1: Vec<_> = h
        .seen()
        .into_iter()
        .filter(|s| s.key == "a" && s.version == 1)
        .collect();
    for w in a1.windows(2) {
        assert!(
            w[1].at - w[0].at >= Duration::from_secs(1),
            "the retry waited its delay"
        );
    }
}

/// Per-key ordered retry: once a key has a record in the retry path, its later records follow
/// it there and never overtake it; other keys keep flowing meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_retry_keeps_a_keys_order_and_lets_other_keys_flow() {
    let h = OrderedHandler::new(&[("a", 1, 2)], false);
    let (_kafka, t, run) =
        consume_orders(RetryOrdering::PerKeyRetry, "1s,2s", 4, "perkey", &h).await;
    let events = [
        event("a", 1),
        event("a", 2),
        event("b", 1),
        event("a", 3),
        event("b", 2),
    ];
    publish_and_apply_all(t.as_ref(), &h, run, &events).await;
    assert_eq!(
        h.calls_of("a"),
        vec![(1, 0), (1, 1), (1, 2), (2, 0), (3, 0)],
        "a's later records waited behind a1 in the retry path, unhandled until a1 succeeded"
    );
    assert_eq!(h.applied_of("b"), vec![1, 2]);
    let seen = h.seen();
    let a1_done = seen
        .iter()
        .find(|s| s.key == "a" && s.version == 1 && s.ok)
        .expect("a1 succeeded")
        .at;
    assert!(
        seen.iter().filter(|s| s.key == "b").all(|s| s.at < a1_done),
        "b's records were handled while a1 waited in the retry path"
    );
}
