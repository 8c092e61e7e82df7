//! The source article's fault scenarios that apply to SQS, against the endpoint: a consumer
//! killed (SIGKILL) after its commit and before the delete; a visibility timeout shorter than
//! the handler (and the heartbeat that prevents it); a corrupt message from a foreign producer;
//! a message that kills its consumer every time, moved to the DLQ by `maxReceiveCount` and
//! parked with the last error the consumer recorded.
//!
//! The killed consumer is this test binary re-run as a child process with the worker
//! variables set.

mod common;

use common::probe::{Mode, Probe, config, first_transient_retry, policy, run, store_at};
use common::{
    TestSqs, assert_moved_with_the_recorded_error, eventually, order, order_subscriber,
    receive_within,
};
use postroom_core::consumer::{Consumer, ConsumerConfig, Ordering};
use postroom_core::failpoint::{self, Action};
use postroom_core::parking::ingest::ingest_dead_letters;
use postroom_core::{
    Delivery, ErrorClass, MessageId, ParkingFilter, ParkingStore, Subscription, Transport,
};
use postroom_sqs::{SqsTransport, TopologyConfig};
use postroom_testkit::cases::publish_to;
use postroom_testkit::child::this_test_again;
use std::io::BufRead;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

const WORKER_PREFIX: &str = "POSTROOM_SQS_WORKER_PREFIX";
const WORKER_DB: &str = "POSTROOM_SQS_WORKER_DB";
const CRASH_LINE: &str = "CRASH-POINT consumer.before_ack";

/// The settings of consumer `name` in these tests: one handler at a time, a transient failure
/// retried after 1 s, three retries at most.
fn settings(name: &str) -> ConsumerConfig {
    config(name, policy("1s", 3), 1, Ordering::Unordered)
}

/// Consumer `name` on `transport`, running `probe`, checked against what SQS can do.
fn consumer_on(
    transport: &SqsTransport,
    name: &str,
    probe: &Arc<Probe>,
) -> postroom_core::Result<Consumer<Probe>> {
    Consumer::for_transport(settings(name), probe.clone(), &transport.capabilities())
}

/// A probe for consumer `slow` whose inbox is a fresh SQLite file in `dir`.
async fn slow_probe(dir: &Path, mode: Mode) -> Arc<Probe> {
    Probe::with_inbox(store_at(&dir.join("s.db")).await, "slow", mode)
}

/// A transport whose queues hide a received message for 1 s and move it to the DLQ when a
/// receive finds it received three times already.
async fn crash_loop_transport(t: &TestSqs) -> Arc<SqsTransport> {
    t.transport(TopologyConfig {
        max_receive_count: 3,
        ..t.config_with_short_visibility()
    })
    .await
}

fn killed_config(prefix: &str) -> TopologyConfig {
    TopologyConfig {
        prefix: prefix.to_string(),
        visibility_timeout: Duration::from_secs(2),
        ..TopologyConfig::default()
    }
    .with_consumer("inventory", &["order.created"])
}

/// The consumer process: commits the effect, reports the crash point, and waits there to be
/// killed.
async fn killed_worker(prefix: String, db: String) {
    let cfg = killed_config(&prefix);
    let transport = SqsTransport::connect(common::client().await, cfg)
        .await
        .expect("transport");
    let probe = Probe::with_inbox(store_at(db.as_ref()).await, "inventory", Mode::Ok);
    failpoint::arm(
        failpoint::CONSUMER_BEFORE_ACK,
        Action::Call(Arc::new(|| {
            Box::pin(async {
                println!("{CRASH_LINE}");
                use std::io::Write;
                let _ = std::io::stdout().flush();
                std::future::pending::<()>().await;
            })
        })),
        0,
        None,
    );
    let consumer = consumer_on(&transport, "inventory", &probe).unwrap();
    let (_keep, rx) = tokio::sync::watch::channel(false);
    consumer
        .run_on(
            &transport,
            &Subscription::new("inventory", &["order.created"]),
            rx,
        )
        .await
        .unwrap();
}

#[test]
fn consumer_killed_after_commit_before_delete_gives_one_effect() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let (Ok(prefix), Ok(db)) = (std::env::var(WORKER_PREFIX), std::env::var(WORKER_DB)) {
        rt.block_on(killed_worker(prefix, db));
        return;
    }
    rt.block_on(async {
        let t = TestSqs::new().await;
        let cfg = killed_config(&t.prefix);
        t.apply(&cfg).await;
        let transport = t.transport(cfg).await;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inventory.db");
        let probe = Probe::with_inbox(store_at(&db).await, "inventory", Mode::Ok);
        let env = order("killed-1", 1);
        publish_to(transport.publisher(), &env, "order.created").await;

        let mut child =
            this_test_again("consumer_killed_after_commit_before_delete_gives_one_effect")
                .env(WORKER_PREFIX, &t.prefix)
                .env(WORKER_DB, &db)
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn the consumer process");
        let stdout = child.stdout.take().unwrap();
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains(CRASH_LINE) {
                    let _ = seen_tx.send(());
                }
            }
        });
        let reached = seen_rx.recv_timeout(Duration::from_secs(30)).is_ok();
        child.kill().expect("SIGKILL the consumer process");
        let _ = child.wait();
        assert!(reached, "the consumer process reached its crash point");
        assert_eq!(probe.effects("killed-1").await, 1, "the child committed");

        // The message comes back after its visibility timeout; the inbox absorbs it.
        let running = run(
            consumer_on(&transport, "inventory", &probe).unwrap(),
            order_subscriber(&transport, "inventory").await,
        );
        assert!(
            eventually(Duration::from_secs(20), || async {
                probe
                    .calls_for(env.id)
                    .iter()
                    .any(|c| c.outcome != "running")
            })
            .await,
            "redelivered after the kill"
        );
        let stats = running.stop().await;
        assert_eq!((stats.applied, stats.duplicates), (0, 1));
        assert_eq!(probe.effects("killed-1").await, 1, "one effect");
        let mut sub = order_subscriber(&transport, "inventory").await;
        assert!(
            receive_within(&mut sub, Duration::from_secs(3))
                .await
                .is_none(),
            "deleted once the duplicate was absorbed"
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visibility_shorter_than_the_handler_gives_a_duplicate_that_is_absorbed_and_counted() {
    let t = TestSqs::new().await;
    let transport = t
        .transport(TopologyConfig {
            extend_visibility: false,
            ..t.config_with_short_visibility()
        })
        .await;
    let dir = tempfile::tempdir().unwrap();
    let probe = slow_probe(dir.path(), Mode::SlowFirst(Duration::from_secs(3))).await;
    let refused = consumer_on(&transport, "slow", &probe);
    assert!(
        refused.is_err(),
        "a handler timeout longer than a fixed visibility timeout is refused up front"
    );
    // Run it anyway: the fault this check exists for.
    let sub = Subscription::new("slow", &["order.created"]).prefetch(1);
    let first = run(
        Consumer::new(settings("slow"), probe.clone()),
        transport.subscriber(&sub).await.unwrap(),
    );
    let second = run(
        Consumer::new(settings("slow"), probe.clone()),
        transport.subscriber(&sub).await.unwrap(),
    );
    let env = order("slow-1", 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            let calls = probe.calls_for(env.id);
            calls.len() >= 2 && calls.iter().all(|c| c.outcome != "running")
        })
        .await,
        "the message reached a second handler while the first still ran"
    );
    let (a, b) = (first.stop().await, second.stop().await);
    assert_eq!(a.applied + b.applied, 1);
    assert_eq!(a.duplicates + b.duplicates, 1, "the duplicate was absorbed");
    assert_eq!(probe.effects("slow-1").await, 1);
    assert!(
        transport.stats().ownership_lost() >= 1,
        "the lost ownership was counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_keeps_a_slow_handler_s_message_hidden() {
    let t = TestSqs::new().await;
    let transport = t.transport(t.config_with_short_visibility()).await;
    let dir = tempfile::tempdir().unwrap();
    let probe = slow_probe(dir.path(), Mode::SlowFirst(Duration::from_millis(3500))).await;
    let sub = Subscription::new("slow", &["order.created"]).prefetch(1);
    let mut runs = Vec::new();
    for _ in 0..2 {
        let consumer = consumer_on(&transport, "slow", &probe)
            .expect("with the heartbeat, ownership is not bounded by the visibility timeout");
        runs.push(run(consumer, transport.subscriber(&sub).await.unwrap()));
    }
    let env = order("slow-2", 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            probe
                .calls_for(env.id)
                .iter()
                .any(|c| c.outcome == "applied")
        })
        .await
    );
    // Longer than the visibility timeout: an undeleted copy would be back by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for r in runs {
        r.stop().await;
    }
    assert_eq!(probe.calls_for(env.id).len(), 1, "no second delivery");
    assert_eq!(transport.stats().ownership_lost(), 0);
    assert!(transport.stats().extended() >= 2, "visibility was extended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_message_from_a_foreign_producer_is_parked_on_its_first_receive() {
    let t = TestSqs::new().await;
    let transport = t.transport(t.config()).await;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store_at(&dir.path().join("c.db")).await);
    let probe = Probe::with_inbox((*store).clone(), "corrupt", Mode::Ok);
    let sub = Subscription::new("corrupt", &["order.created"]);
    let running = run(
        consumer_on(&transport, "corrupt", &probe).unwrap(),
        transport.subscriber(&sub).await.unwrap(),
    );
    let url = transport.queues("corrupt").unwrap().work_url.clone();
    let body = "{\"id\": not json";
    t.client
        .send_message()
        .queue_url(&url)
        .message_body(body)
        .send()
        .await
        .unwrap();
    let parked = || async {
        ingest_dead_letters(
            &*transport,
            "corrupt",
            store.clone(),
            Duration::from_millis(600),
        )
        .await
        .unwrap();
        store.search(&ParkingFilter::default(), 10).await.unwrap()
    };
    assert!(
        eventually(Duration::from_secs(20), || async {
            !parked().await.is_empty()
        })
        .await,
        "parked"
    );
    let stats = running.stop().await;
    let p = &parked().await[0];
    assert_eq!(p.message_id, MessageId::derived_from(body.as_bytes()));
    assert_eq!(p.error_code, "malformed");
    assert_eq!(p.error_class, ErrorClass::Permanent);
    assert_eq!(p.attempts, 1);
    assert_eq!(p.body, body.as_bytes());
    assert_eq!(p.consumer, "corrupt");
    assert!(probe.calls().is_empty(), "the handler never saw it");
    assert!(stats.retries_by_stage.is_empty(), "never retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_kills_its_consumer_is_moved_by_max_receive_count_and_parked_with_its_last_error()
 {
    let t = TestSqs::new().await;
    let transport = crash_loop_transport(&t).await;
    let sub = Subscription::new("poison", &["order.created"]);
    let mut consumer_sub = transport.subscriber(&sub).await.unwrap();
    let env = order("poison-1", 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    // First receive: a transient failure, retried after 1 s; the error is recorded.
    let first = receive_within(&mut consumer_sub, Duration::from_secs(10))
        .await
        .expect("first receive");
    assert_eq!(first.message().deliveries, Some(1));
    let failed_at = chrono::Utc::now();
    let plan = first_transient_retry(&policy("1s", 5), failed_at);
    first.retry(&plan).await.map_err(|(e, _)| e).unwrap();
    // Second and third receives: the consumer dies holding the message each time.
    for n in 2..=3 {
        let d = receive_within(&mut consumer_sub, Duration::from_secs(10))
            .await
            .expect("received again");
        assert_eq!(d.message().deliveries, Some(n));
        assert_eq!(
            d.message().attempt(),
            n - 1,
            "attempt from the receive count"
        );
        assert_eq!(
            d.message()
                .headers
                .get("x-last-error-code")
                .map(String::as_str),
            Some("db_down"),
            "the recorded error travels with the receive"
        );
        drop(d);
    }
    // The next receive finds the count at maxReceiveCount: SQS moves it to the DLQ.
    assert!(
        receive_within(&mut consumer_sub, Duration::from_secs(3))
            .await
            .is_none(),
        "moved away"
    );
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store_at(&dir.path().join("p.db")).await);
    let n = ingest_dead_letters(&*transport, "poison", store.clone(), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(n, 1);
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.consumer, "poison");
    assert_eq!(p.attempts, 3);
    assert_eq!(p.routing_key, "order.created");
    assert_eq!(p.message_type.as_deref(), Some("order.created"));
    assert_moved_with_the_recorded_error(p, failed_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_parks_a_crash_loop_with_its_diagnostics_on_the_last_receive_sqs_allows() {
    let t = TestSqs::new().await;
    let transport = crash_loop_transport(&t).await;
    let sub = Subscription::new("crashy", &["order.created"]);
    let env = order("crashy-1", 1);
    let mut raw = transport.subscriber(&sub).await.unwrap();
    publish_to(transport.publisher(), &env, "order.created").await;
    // Two receives whose consumer died before settling.
    for n in 1..=2 {
        let d = receive_within(&mut raw, Duration::from_secs(10))
            .await
            .expect("received");
        assert_eq!(d.message().deliveries, Some(n));
        drop(d);
    }
    drop(raw);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store_at(&dir.path().join("k.db")).await);
    let probe = Probe::with_inbox((*store).clone(), "crashy", Mode::Ok);
    let consumer = consumer_on(&transport, "crashy", &probe).unwrap();
    let running = run(consumer, transport.subscriber(&sub).await.unwrap());
    assert!(
        eventually(Duration::from_secs(20), || async {
            running
                .stats
                .snapshot()
                .parked_by_code
                .contains_key("crash_loop")
        })
        .await,
        "parked by the consumer on the third receive"
    );
    running.stop().await;
    assert!(probe.calls().is_empty(), "not handled a third time");
    ingest_dead_letters(&*transport, "crashy", store.clone(), Duration::from_secs(1))
        .await
        .unwrap();
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.error_code, "crash_loop");
    assert_eq!(p.attempts, 3);
    assert_eq!(
        p.consumer_version, "test-1",
        "with the consumer's diagnostics"
    );
    assert_eq!(p.routing_key, "order.created");
}
