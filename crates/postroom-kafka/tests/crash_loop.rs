//! A record whose handling kills the consumer process, against the real broker: the delivery
//! ledger counts its deliveries across processes, and once the count reaches the bound the
//! record is parked with reason `crash_loop` without being handled, and the group's offset
//! moves past it. Records that were in flight with it are handled, not parked: after a crash,
//! a record counted before is handed out alone, so later crashes count against the poison
//! only.
//!
//! The consumer processes are this test binary, re-run with this test as the only one and the
//! workload in the environment; their handler aborts the process (SIGABRT) on the poison.

mod common;

use common::{TestKafka, brokers, parked};
use postroom_core::{
    Consumer, ConsumerConfig, Envelope, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming,
    Ordering, OutgoingMessage, RetryPolicy, Subscription, Transport, async_trait,
};
use postroom_kafka::{ConsumerTopics, KafkaConfig, KafkaTransport};
use postroom_testkit::cases::crash_loop::{assert_parked_as_crash_loop, crash_until_parked};
use postroom_testkit::child::this_test_again;
use postroom_testkit::stores::sqlite::SqliteFixture;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_PREFIX: &str = "POSTROOM_KAFKA_CRASH_PREFIX";
const CHILD_LOG: &str = "POSTROOM_KAFKA_CRASH_LOG";
const MAX_DELIVERIES: u32 = 3;
const CONSUMER: &str = "crashy";
const ROUTE: &str = "orders";
const INNOCENTS: u64 = 6;

fn config(prefix: &str) -> KafkaConfig {
    let mut c = KafkaConfig::new(brokers())
        .prefix(prefix)
        .ladder("1s".parse().unwrap())
        .partitions(1);
    c.revoke_wait = Duration::from_secs(5);
    c
}

fn subscription() -> Subscription {
    Subscription::new(CONSUMER, &[ROUTE]).prefetch(8)
}

/// Aborts the process on the poison (key `boom`), as a segfault would; logs every other
/// record it handles.
struct AbortsOnPoison {
    log: String,
}

#[async_trait]
impl Handler for AbortsOnPoison {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let key = &m.envelope.aggregate.id;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        writeln!(log, "{key}").expect("log line");
        log.sync_all().expect("log sync");
        if key == "boom" {
            std::process::abort();
        }
        Ok(Handled::Applied)
    }
}

/// A consumer process: runs until its handler aborts it, or until killed.
async fn consumer_process(prefix: String, log: String) {
    let transport = KafkaTransport::new(config(&prefix)).unwrap();
    let mut cfg = ConsumerConfig::new(
        CONSUMER,
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.max_deliveries = MAX_DELIVERIES;
    cfg.retry = RetryPolicy::with_ladder("1s".parse().unwrap());
    cfg.version = "crash-1".into();
    cfg.concurrency = 2;
    cfg.ordering = Ordering::PerKey;
    cfg.breaker.failure_threshold = 0;
    let consumer = Consumer::for_transport(
        cfg,
        Arc::new(AbortsOnPoison { log }),
        &transport.capabilities(),
    )
    .unwrap();
    let (_never, rx) = tokio::sync::watch::channel(false);
    consumer
        .run_on(&transport, &subscription(), rx)
        .await
        .unwrap();
}

fn spawn_consumer(prefix: &str, log: &str) -> Child {
    this_test_again("a_record_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop")
        .env(CHILD_PREFIX, prefix)
        .env(CHILD_LOG, log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a consumer process")
}

fn order(key: &str) -> Envelope {
    Envelope::builder("order.created", "crash-test")
        .aggregate("order", key, 1)
        .build()
}

/// Records in the parking topic of the consumer.
fn parking_records(config: &KafkaConfig) -> i64 {
    let probe: BaseConsumer = config.client_config().create().expect("client");
    let topic = ConsumerTopics::new(&config.prefix, CONSUMER).parking;
    probe
        .fetch_watermarks(&topic, 0, Duration::from_secs(5))
        .map_or(0, |(low, high)| high - low)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop() {
    if let (Ok(prefix), Ok(log)) = (std::env::var(CHILD_PREFIX), std::env::var(CHILD_LOG)) {
        consumer_process(prefix, log).await;
        return;
    }
    let kafka = TestKafka::new("1s");
    let config = config(&kafka.prefix);
    let transport = KafkaTransport::new(config.clone()).unwrap();
    assert!(
        transport.capabilities().redelivery.counted,
        "Kafka counts deliveries (its delivery ledger)"
    );
    transport.bind(&subscription()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("handled.log");
    let log = log.to_str().unwrap().to_string();
    // The poison first, then records of other keys in the same partition: they are fetched
    // and in flight with it when it kills the process.
    let poison = order("boom");
    let mut events = vec![poison.clone()];
    events.extend((0..INNOCENTS).map(|i| order(&format!("fine-{i}"))));
    let publisher = transport.publisher();
    for e in &events {
        publisher
            .publish(&OutgoingMessage::from_envelope(e, ROUTE))
            .await
            .unwrap();
    }

    let deadline = Instant::now() + Duration::from_secs(150);
    let run = crash_until_parked(
        || spawn_consumer(&kafka.prefix, &log),
        || std::future::ready(parking_records(&config) > 0),
        |status| status.signal() == Some(6),
        2 * MAX_DELIVERIES,
        Duration::from_secs(150),
    )
    .await;
    let crashes = run.crashes;
    assert!(
        run.survivor.is_some(),
        "a running consumer parked the poison"
    );
    // The group's offset moves past the parked record and every innocent one.
    let mut backlog = transport.backlog(CONSUMER).await.unwrap();
    while backlog.ready > 0 {
        assert!(
            Instant::now() < deadline,
            "offsets not committed: {backlog:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        backlog = transport.backlog(CONSUMER).await.unwrap();
    }
    drop(run); // kills the survivor

    // Every delivery below the bound is counted in the ledger when it is fetched: the poison
    // is handled on each one a process lived to handle (and dies of it), then parked
    // unhandled. A process that died of something else after fetching it (on a loaded
    // machine the client itself has aborted) used one of those deliveries without a call.
    let handled = std::fs::read_to_string(&log).unwrap();
    let poison_calls = handled.lines().filter(|l| *l == "boom").count() as u32;
    assert_eq!(
        crashes,
        MAX_DELIVERIES - 1,
        "one process gone per delivery below the bound, then parked unhandled:\n{handled}"
    );
    assert!(
        (1..=MAX_DELIVERIES - 1).contains(&poison_calls),
        "the poison handled {poison_calls} times, at most {} allowed:\n{handled}",
        MAX_DELIVERIES - 1
    );
    for i in 0..INNOCENTS {
        let key = format!("fine-{i}");
        assert!(
            handled.lines().any(|l| l == key),
            "{key} handled:\n{handled}"
        );
    }

    let store = Arc::new(SqliteFixture::fresh().await);
    let parked = parked(&transport, &store, CONSUMER).await;
    assert_eq!(parked.len(), 1, "only the poison is parked: {parked:?}");
    assert_eq!(parked[0].message_id, poison.id);
    assert_parked_as_crash_loop(&parked[0], MAX_DELIVERIES, "crash-1");
}
