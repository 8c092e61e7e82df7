//! Moving a live system from NATS JetStream to Kafka, against the real servers
//! (`POSTROOM_TEST_NATS`, `POSTROOM_TEST_KAFKA`, `POSTROOM_TEST_PG`; a missing one fails):
//!
//! - the migration demo: nothing lost, nothing applied twice, an inventory consumer SIGKILLed
//!   on each feed while both run, duplicates absorbed;
//! - one outbox, two brokers: a row is marked only when both confirmed; with one broker
//!   down the row stays unpublished and is published again, and the copy the other broker
//!   already had is absorbed by the inbox;
//! - one inbox, two feeds, ordered mode: a gap that spans the switch (a version left on the
//!   old broker when its feed stopped) holds the key until the old feed is started again.

mod common;

use common::nats::{connect, prefix, stream_messages, url as nats};
use common::{TestDb, broker_demo, kafka, kafka_cleanup};
use postroom_core::inbox_feed::FeedCounts;
use postroom_core::{
    Envelope, MessageId, OutboxRelay, OutboxStore, OutgoingMessage, RelayConfig, Subscription,
    Transport,
};
use postroom_nats::topology::reset::delete_workload;
use postroom_ops::{Endpoint, Registry, TransportSpec, Workload};
use postroom_postgres::{InboxQueue, OrderedMode, PgStore, TablePrefix};
use postroom_testkit::effect::VersionLog;
use postroom_testkit::running::{inbox_queue_config, spawn_workers};
use postroom_testkit::wait::eventually as wait_until;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const CONSUMER: &str = "inventory";
const ROUTE: &str = "order.created";

/// Delete what `prefix` names on both brokers.
async fn cleanup(prefix: &str) {
    let _ = delete_workload(&connect().await, prefix).await;
    kafka_cleanup(prefix).await;
}

/// Close the transports of both brokers, then delete what `prefix` names on them.
async fn close_and_clean_up(prefix: &str, transports: [Arc<dyn Transport>; 2]) {
    for t in transports {
        t.close().await;
    }
    cleanup(prefix).await;
}

/// Write `dir`'s topology file: the workload `p`, its ladder line `ladder` (or none), and
/// the consumer on its route.
fn write_topology(dir: &Path, p: &str, ladder: &str) {
    std::fs::write(
        dir.join("topology.toml"),
        format!(
            "prefix = \"{p}\"\n{ladder}[[consumers]]\nname = \"{CONSUMER}\"\nbindings = [\"{ROUTE}\"]\n"
        ),
    )
    .unwrap();
}

/// A directory holding the topology file of a new workload named after `name` (its ladder
/// line `ladder`, or none), and the workload's prefix.
fn workload_dir(name: &str, ladder: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = prefix(name);
    write_topology(dir.path(), &p, ladder);
    (dir, p)
}

/// Write `m` into the outbox, in a transaction of its own.
async fn enqueue(store: &PgStore, m: &OutgoingMessage) {
    let mut tx = store.pool().begin().await.unwrap();
    postroom_postgres::outbox::enqueue(&mut tx, store.prefix(), m)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// Assert that the inbox queue holds each of `ids` once.
async fn assert_stored_once(store: &PgStore, ids: &[MessageId]) {
    for id in ids {
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {}inbox_queue WHERE message_id = $1",
            store.prefix()
        ))
        .bind(id.as_uuid())
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert_eq!(n, 1, "{id} stored once");
    }
}

/// A transport for `prefix`'s workload (one consumer on `order.created`), opened through the
/// registry; `fresh`: its topology declared from an empty state.
async fn open(url: &str, prefix: &str, fresh: bool) -> Arc<dyn Transport> {
    let workload = Workload::new(prefix, postroom_ops::time::parse_ladder("1s").unwrap())
        .consumer(CONSUMER, &[ROUTE]);
    let mut spec = TransportSpec::of(workload);
    spec.fresh = fresh;
    spec.redelivery_after = Some(Duration::from_secs(5));
    Registry::builtin()
        .open_transport(&Endpoint::broker(url).unwrap(), &spec)
        .await
        .unwrap_or_else(|e| panic!("{url} is required for these tests: {e}"))
}

fn subscription() -> Subscription {
    Subscription::new(CONSUMER, &[ROUTE]).prefetch(16)
}

async fn store(db: &TestDb) -> PgStore {
    let store = PgStore::from_pool(db.pool(12).await, TablePrefix::default());
    store.migrate().await.unwrap();
    store
}

fn inbox_queue(store: &PgStore, ordered: bool) -> InboxQueue {
    let mut cfg = inbox_queue_config(CONSUMER);
    cfg.workers = 2;
    if ordered {
        cfg.ordered = Some(OrderedMode {
            gap_wait: Duration::from_secs(120),
            recheck: Duration::from_millis(50),
        });
    }
    InboxQueue::new(store.pool().clone(), store.prefix().clone(), cfg).unwrap()
}

/// A feed from `transport` into `iq` under `name`, until its switch turns.
async fn start_feed(
    iq: &InboxQueue,
    transport: &Arc<dyn Transport>,
    name: &'static str,
) -> (watch::Sender<bool>, JoinHandle<FeedCounts>) {
    let sub = transport.subscribe(&subscription()).await.unwrap();
    let (stop, rx) = watch::channel(false);
    let iq = iq.clone();
    (
        stop,
        tokio::spawn(async move { iq.feed(name, sub, rx).await }),
    )
}

async fn stop_feed(feed: (watch::Sender<bool>, JoinHandle<FeedCounts>)) -> FeedCounts {
    feed.0.send_replace(true);
    feed.1.await.unwrap()
}

async fn inbox_rows(store: &PgStore) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}inbox_queue",
        store.prefix()
    ))
    .fetch_one(store.pool())
    .await
    .unwrap()
}

fn event(agg: &str, version: u64) -> Envelope {
    Envelope::builder("order.created", "orders")
        .aggregate("order", agg, version)
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_migration_demo_moves_the_feed_from_nats_to_kafka_with_nothing_lost_or_applied_twice() {
    let p = prefix("move");
    let r = broker_demo(
        &nats(),
        &p,
        &["--migrate-to", &kafka(), "--timeout-secs", "400"],
        Vec::new(),
    )
    .await;
    cleanup(&p).await;
    assert_eq!(r["failures"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert_eq!(r["duplicate_effects"], 0, "{r}");
    assert_eq!(r["order_violations"], 0, "{r}");
    let m = &r["migration"];
    assert_eq!(m["from"], "nats", "{r}");
    assert_eq!(m["to"], "kafka", "{r}");
    // One inventory consumer of each feed was SIGKILLed while both feeds ran.
    assert!(m["overlap_kills"]["nats"].as_u64().unwrap_or(0) >= 1, "{r}");
    assert!(
        m["overlap_kills"]["kafka"].as_u64().unwrap_or(0) >= 1,
        "{r}"
    );
    // Every order of the overlap reached the inbox twice, once from each broker.
    assert!(
        m["overlap_duplicates_absorbed"].as_u64().unwrap() > 0,
        "{r}"
    );
    let steps: Vec<&str> = m["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "relay publishes to nats alone",
            "relay publishes to nats + kafka",
            "kafka feed started beside the nats feed",
            "nats feed stopped",
            "relay publishes to kafka alone",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_is_marked_only_when_both_brokers_confirmed_and_the_early_copy_is_absorbed() {
    let p = prefix("fan");
    let db = TestDb::create().await;
    let store = store(&db).await;
    let outbox: Arc<dyn OutboxStore> = Arc::new(store.outbox());
    let iq = inbox_queue(&store, false);

    // Kafka is ready; NATS has no stream for the workload yet: every publish to it fails.
    let kafka_t = open(&kafka(), &p, true).await;
    kafka_t.bind(&subscription()).await.unwrap();
    let nats_t = open(&nats(), &p, false).await;
    let kafka_feed = start_feed(&iq, &kafka_t, "kafka").await;

    let mut ids = Vec::new();
    for n in 0..3 {
        let m = OutgoingMessage::from_envelope(&event(&format!("fan-{n}"), 1), ROUTE);
        enqueue(&store, &m).await;
        ids.push(m.id);
    }
    let publisher =
        postroom_ops::relay::publisher_to(&nats_t, std::slice::from_ref(&kafka_t)).unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        publisher,
        RelayConfig {
            relay_id: format!("{p}-relay"),
            retry_after: Duration::from_millis(100),
            ..RelayConfig::default()
        },
    );
    let first = relay.run_once().await.unwrap();
    assert_eq!((first.claimed, first.published, first.failed), (3, 0, 3));
    assert_eq!(outbox.pending().await.unwrap(), 3, "no row is marked");
    // Kafka confirmed its copies all the same: they are in the inbox already.
    assert!(
        wait_until(Duration::from_secs(60), async || inbox_rows(&store).await
            == 3)
        .await,
        "the Kafka copies stored"
    );

    // NATS comes back; the rows are published again, to both.
    nats_t.bind(&subscription()).await.unwrap();
    let nats_feed = start_feed(&iq, &nats_t, "nats").await;
    let mut published = 0;
    assert!(
        wait_until(Duration::from_secs(60), async || {
            published += relay.run_once().await.unwrap().published;
            published == 3
        })
        .await,
        "every row published once both confirmed ({published} of 3)"
    );
    assert_eq!(outbox.pending().await.unwrap(), 0);

    // The inbox keeps one row per id: the NATS copies and Kafka's second copies are absorbed.
    assert_eq!(inbox_rows(&store).await, 3);
    // Both feeds have seen every copy once their brokers' backlogs are empty.
    assert!(
        wait_until(Duration::from_secs(60), async || {
            let k = kafka_t
                .backlog(CONSUMER)
                .await
                .is_ok_and(|b| b.ready == 0 && b.unacked == 0);
            let n = nats_t
                .backlog(CONSUMER)
                .await
                .is_ok_and(|b| b.ready == 0 && b.unacked == 0);
            k && n
        })
        .await,
        "both brokers' copies taken"
    );
    let k = stop_feed(kafka_feed).await;
    let n = stop_feed(nats_feed).await;
    assert_eq!(
        k.stored + n.stored,
        3,
        "one row per id: kafka {k:?}, nats {n:?}"
    );
    assert_eq!(k.stored, 3, "Kafka had the first copies: {k:?}");
    // At least: a broker may deliver a copy again (a rebalance, an ack wait run out).
    assert!(k.duplicates >= 3, "Kafka's second copies absorbed: {k:?}");
    assert!(n.duplicates >= 3, "the NATS copies absorbed: {n:?}");
    assert_eq!(inbox_rows(&store).await, 3);
    assert_stored_once(&store, &ids).await;
    close_and_clean_up(&p, [nats_t, kafka_t]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gap_that_spans_the_switch_holds_the_key_until_the_old_feed_delivers_the_missing_version()
{
    let p = prefix("gap");
    let db = TestDb::create().await;
    let store = store(&db).await;
    let iq = inbox_queue(&store, true);
    let nats_t = open(&nats(), &p, true).await;
    let kafka_t = open(&kafka(), &p, true).await;
    nats_t.bind(&subscription()).await.unwrap();
    kafka_t.bind(&subscription()).await.unwrap();
    let to_nats = nats_t.publisher();
    let to_kafka = kafka_t.publisher();
    let send = async |to: &[&Arc<dyn postroom_core::Publisher>], e: &Envelope| {
        for p in to {
            p.publish(&OutgoingMessage::from_envelope(e, ROUTE))
                .await
                .unwrap();
        }
    };

    let handler = Arc::new(VersionLog::default());
    let (stop_workers, workers_rx) = watch::channel(false);
    let workers = spawn_workers(&iq, handler.clone(), workers_rx);
    let v: Vec<Envelope> = (1..=5).map(|n| event("switch", n)).collect();

    // Dual publishing with the NATS feed alone: versions 1 and 2 applied.
    let nats_feed = start_feed(&iq, &nats_t, "nats").await;
    send(&[&to_nats, &to_kafka], &v[0]).await;
    send(&[&to_nats, &to_kafka], &v[1]).await;
    assert_eq!(
        handler
            .versions_once("switch", 2, Duration::from_secs(60))
            .await,
        vec![1, 2]
    );
    // The NATS feed stops; version 3 reaches only NATS (published there before publishing to
    // NATS stopped, read by nobody). The Kafka feed starts: its copies of 1 and 2 are
    // duplicates, and versions 4 and 5 come only through Kafka.
    let nats_counts = stop_feed(nats_feed).await;
    send(&[&to_nats], &v[2]).await;
    let kafka_feed = start_feed(&iq, &kafka_t, "kafka").await;
    send(&[&to_kafka], &v[3]).await;
    send(&[&to_kafka], &v[4]).await;

    // Version 4 waits behind the gap at 3; nothing past 2 is applied meanwhile.
    let waiting = async || {
        sqlx::query_scalar::<_, i64>(&format!(
            "SELECT count(*) FROM {}inbox_queue WHERE gap_since IS NOT NULL AND status = 'pending'",
            store.prefix()
        ))
        .fetch_one(store.pool())
        .await
        .unwrap()
    };
    assert!(
        wait_until(Duration::from_secs(60), async || waiting().await >= 1).await,
        "version 4 waits for 3"
    );
    assert_eq!(handler.versions_of("switch"), vec![1, 2]);

    // Going back one step (the NATS feed started again) delivers 3: then 3, 4, 5 in order.
    let nats_feed = start_feed(&iq, &nats_t, "nats").await;
    assert_eq!(
        handler
            .versions_once("switch", 5, Duration::from_secs(60))
            .await,
        vec![1, 2, 3, 4, 5]
    );
    let nats_again = stop_feed(nats_feed).await;
    let kafka_counts = stop_feed(kafka_feed).await;
    assert_eq!(
        nats_counts.stored + nats_again.stored,
        3,
        "1, 2 and 3 from NATS"
    );
    assert_eq!(kafka_counts.stored, 2, "4 and 5 from Kafka");
    assert!(kafka_counts.duplicates >= 2, "Kafka's 1 and 2 absorbed");
    assert_eq!(inbox_rows(&store).await, 5);
    stop_workers.send_replace(true);
    workers.await.unwrap();
    close_and_clean_up(&p, [nats_t, kafka_t]).await;
}

/// The runbook's page of the docs.
const RUNBOOK: &str = "docs/migration-nats-to-kafka.md";

/// The runbook's block (marked as run by this test).
fn runbook() -> String {
    let text = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(RUNBOOK),
    )
    .expect(RUNBOOK);
    let fence = "```sh tested-by=crates/postroom-cli/tests/migrate.rs\n";
    text.match_indices(fence)
        .filter_map(|(at, _)| {
            let body = &text[at + fence.len()..];
            body.find("\n```").map(|end| body[..=end].to_string())
        })
        .find(|b| b.contains("--brokers-file"))
        .unwrap_or_else(|| panic!("{RUNBOOK} has the runbook block"))
}

/// A free port on the loopback.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// The processes the runbook leaves running (or, after a failure, any it started): sent
/// SIGTERM, then SIGKILL if still there, when dropped.
struct PidFiles(std::path::PathBuf);

impl PidFiles {
    fn pids(&self) -> Vec<String> {
        [
            "relay.pid",
            "nats-feed.pid",
            "kafka-feed.pid",
            "console.pid",
        ]
        .iter()
        .filter_map(|f| std::fs::read_to_string(self.0.join(f)).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
    }

    fn alive(pid: &str) -> bool {
        std::process::Command::new("kill")
            .args(["-0", pid])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// SIGTERM each, and wait (bounded) until they are gone; `true` when all ended by it.
    fn terminate(&self) -> bool {
        let pids = self.pids();
        for pid in &pids {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", pid])
                .stderr(std::process::Stdio::null())
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if !pids.iter().any(|p| Self::alive(p)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for PidFiles {
    fn drop(&mut self) {
        for pid in self.pids() {
            if Self::alive(&pid) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid])
                    .status();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_runbook_moves_a_running_system_from_nats_to_kafka_with_each_row_stored_once() {
    let (dir, p) = workload_dir("book", "ladder = \"1s\"\n");
    let db = TestDb::create().await;
    let store = store(&db).await;

    // The application writes orders into the outbox the whole time.
    let (stop_producer, mut producing) = watch::channel(false);
    let producer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut n = 0u64;
            while !*producing.borrow() {
                let agg = format!("book-{}", n % 5);
                let m = OutgoingMessage::from_envelope(&event(&agg, n / 5 + 1), ROUTE);
                enqueue(&store, &m).await;
                ids.push(m.id);
                n += 1;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(40)) => {}
                    _ = producing.changed() => {}
                }
            }
            ids
        })
    };

    let pids = PidFiles(dir.path().to_path_buf());
    let kafka_feed = free_addr();
    let console = free_addr();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_postroom"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = dir.path().join("runbook.log");
    let script = runbook();
    let mut cmd = tokio::process::Command::new("bash");
    cmd.args(["-e", "-c", &script])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("POSTROOM_DATABASE", &db.url)
        .env("NATS", nats())
        .env("KAFKA", kafka())
        .env("RELAY_ADDR", free_addr())
        .env("NATS_FEED_ADDR", free_addr())
        .env("KAFKA_FEED_ADDR", &kafka_feed)
        .env("CONSOLE_ADDR", &console)
        .stdin(std::process::Stdio::null())
        // The processes the block starts keep its output open: a file, not a pipe.
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("runbook.err")).unwrap());
    let status = tokio::time::timeout(Duration::from_secs(400), cmd.status())
        .await
        .expect("the runbook ended within 400 s")
        .unwrap();
    let output = || {
        format!(
            "{}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            std::fs::read_to_string(dir.path().join("runbook.err")).unwrap_or_default()
        )
    };
    assert!(
        status.success(),
        "the runbook failed ({status}):\n{}",
        output()
    );
    // Step 3 printed both feeds' counters.
    let printed = std::fs::read_to_string(&log).unwrap();
    assert!(
        printed.contains("postroom_inbox_feed_duplicates_total{"),
        "{printed}"
    );

    // A few more rows on Kafka alone, then the application stops writing.
    let before = inbox_rows(&store).await;
    assert!(
        wait_until(Duration::from_secs(60), async || inbox_rows(&store).await
            >= before + 5)
        .await,
        "rows keep flowing after the move:\n{}",
        output()
    );
    stop_producer.send_replace(true);
    let ids = producer.await.unwrap();
    assert!(
        wait_until(Duration::from_secs(120), async || inbox_rows(&store).await
            == ids.len() as i64)
        .await,
        "every row reached the inbox queue: {} of {}\n{}",
        inbox_rows(&store).await,
        ids.len(),
        output()
    );
    // The relay stopped publishing to NATS while it ran (step 5): the rows written after
    // that are on Kafka alone, so NATS's stream holds fewer messages than were written.
    let on_nats = messages_on_nats(&p).await;
    assert!(
        on_nats > 0 && on_nats < ids.len() as u64,
        "NATS got {on_nats} of the {} rows: all until Kafka alone was listed, none after",
        ids.len()
    );
    let (code, metrics) = common::daemon::get(&format!("http://{kafka_feed}/metrics")).await;
    assert_eq!(code, 200);
    let absorbed = metric_sum(&metrics, "postroom_inbox_feed_duplicates_total{");
    assert!(absorbed > 0.0, "{metrics}");
    // The console the runbook started watches both feeds: the Kafka feed up with the
    // duplicates it absorbed, the NATS feed (stopped in step 4) down.
    let pipeline = format!("http://{console}/pipeline.json");
    let mut seen = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(60), async || {
            let (code, body) = common::daemon::get(&pipeline).await;
            seen = serde_json::from_str(&body).unwrap_or_default();
            let feed = |name: &str| {
                seen["feeds"]
                    .as_array()
                    .and_then(|f| f.iter().find(|f| f["name"] == name))
                    .cloned()
                    .unwrap_or_default()
            };
            let (nats, kafka) = (feed("nats"), feed("kafka"));
            code == 200
                && nats["up"] == false
                && nats["error"].as_str().is_some_and(|e| !e.is_empty())
                && kafka["up"] == true
                && kafka["consumers"][0]["consumer"] == CONSUMER
                && kafka["consumers"][0]["duplicates_absorbed"]
                    .as_u64()
                    .is_some_and(|n| n > 0)
                && kafka["consumers"][0]["lag"].is_u64()
        })
        .await,
        "the console shows the Kafka feed up with duplicates absorbed and the NATS feed down: {seen}"
    );
    assert!(
        pids.terminate(),
        "the relay, the Kafka feed and the console stop on SIGTERM"
    );

    let outbox = store.outbox();
    assert_eq!(
        OutboxStore::pending(&outbox).await.unwrap(),
        0,
        "every row marked"
    );
    assert_stored_once(&store, &ids).await;
    cleanup(&p).await;
}

#[test]
fn the_move_refuses_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_topology(d, "badmove", "");
    // A second broker for the relay needs a first one.
    let out = common::postroom(
        d,
        &[
            "relay",
            "--database",
            "app.db",
            "--also-publish-to",
            &kafka(),
            "--listen",
            "127.0.0.1:0",
        ],
    );
    common::usage_error(&out, "--also-publish-to needs --broker");
    // A brokers file that lists nothing, or a line that is not a URL, is refused at start
    // with what is wrong; so is a brokers file beside --broker.
    std::fs::write(d.join("none"), "# nothing yet\n\n").unwrap();
    std::fs::write(d.join("bad"), format!("{}\nkafka 127.0.0.1\n", kafka())).unwrap();
    for (file, says) in [("none", "lists no broker"), ("bad", "line 2")] {
        let out = common::postroom(
            d,
            &[
                "relay",
                "--database",
                "app.db",
                "--brokers-file",
                file,
                "--listen",
                "127.0.0.1:0",
            ],
        );
        common::usage_error(&out, says);
    }
    let out = common::postroom(
        d,
        &[
            "relay",
            "--database",
            "app.db",
            "--broker",
            &kafka(),
            "--brokers-file",
            "none",
        ],
    );
    common::usage_error(&out, "cannot be used with");
    // A feed without a broker has nothing to move.
    let out = common::postroom(
        d,
        &["feed", "--database", "app.db", "--consumer", "inventory"],
    );
    common::usage_error(&out, "pass --broker");
    // The demo's move needs the broker it moves from.
    let out = common::postroom(d, &["demo", "--migrate-to", &kafka()]);
    common::usage_error(&out, "--broker");
}

/// Messages in the NATS work stream of workload `prefix`.
async fn messages_on_nats(prefix: &str) -> u64 {
    let conn = connect().await;
    let messages = stream_messages(&conn, &postroom_nats::naming::work_stream(prefix)).await;
    conn.close().await;
    messages
}

/// The sum of the series of `metric` in a `/metrics` text.
fn metric_sum(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(metric))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A brokers file that names a broker nobody answers at, or that cannot be read, changes
/// nothing: the relay says why, keeps publishing to the brokers it had, and takes the next
/// usable file.
#[tokio::test(flavor = "multi_thread")]
async fn a_broker_that_cannot_be_opened_leaves_the_relay_on_the_brokers_it_had() {
    use common::daemon::{Daemon, get};
    let (dir, p) = workload_dir("unreachable", "ladder = \"1s\"\n");
    let d = dir.path();
    let db = TestDb::create().await;
    let store = store(&db).await;
    std::fs::write(d.join("brokers"), format!("{}\n", nats())).unwrap();
    let log = d.join("relay.err");
    let relay = Daemon::start_logging(
        d,
        &[
            "relay",
            "--database",
            &db.url,
            "--topology",
            "topology.toml",
            "--brokers-file",
            "brokers",
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
        &log,
    );
    let metrics = format!("{}/metrics", relay.base);
    let targets = async || metric_sum(&get(&metrics).await.1, "postroom_relay_target");
    assert!(
        wait_until(Duration::from_secs(30), async || targets().await == 1.0).await,
        "the relay publishes to NATS"
    );
    let written = async |from: u64| {
        for v in from..from + 5 {
            let m = OutgoingMessage::from_envelope(&event("unreach", v), ROUTE);
            enqueue(&store, &m).await;
        }
    };
    let relayed = async || {
        wait_until(Duration::from_secs(30), async || {
            store.outbox().pending().await.unwrap() == 0
        })
        .await
    };
    let logged = |what: &str| {
        let what = what.to_string();
        let log = log.clone();
        async move {
            wait_until(Duration::from_secs(30), async || {
                std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .contains(&what)
            })
            .await
        }
    };
    // After a hang-up the relay reads the file again: it logs `says` (`what`, in words) and
    // keeps NATS alone, still publishing the rows written from version `from` on.
    let keeps_nats_after_hangup = async |says: &str, what: &str, from: u64| {
        relay.hangup();
        assert!(
            logged(says).await,
            "the relay says {what}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert_eq!(targets().await, 1.0, "still NATS alone");
        written(from).await;
        assert!(relayed().await, "rows are still published to NATS");
    };
    written(1).await;
    assert!(relayed().await, "rows are published while NATS is listed");

    // A second broker nothing answers at: reported, the list in use is kept.
    std::fs::write(
        d.join("brokers"),
        format!("{}\namqp://guest:guest@127.0.0.1:1/%2f\n", nats()),
    )
    .unwrap();
    keeps_nats_after_hangup("cannot be opened", "the new broker cannot be opened", 6).await;

    // A file that is not a list of brokers: reported, the list in use is kept.
    std::fs::write(d.join("brokers"), "nats 127.0.0.1\n").unwrap();
    keeps_nats_after_hangup("cannot be used", "the file cannot be used", 11).await;

    let on_nats = messages_on_nats(&p).await;
    assert_eq!(on_nats, 15, "every row reached NATS once");
    let status = relay.terminate(Duration::from_secs(30));
    assert!(status.success(), "SIGTERM ends the relay cleanly: {status}");
    cleanup(&p).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_feed_into_a_store_without_an_inbox_queue_is_refused_clearly() {
    let (dir, p) = workload_dir("sqlitefeed", "");
    let d = dir.path();
    std::fs::write(d.join("app.db"), b"").unwrap();
    let out = common::postroom_async(
        d,
        &[
            "feed",
            "--database",
            "app.db",
            "--broker",
            &nats(),
            "--consumer",
            "inventory",
            "--listen",
            "127.0.0.1:0",
        ],
    )
    .await;
    common::usage_error(&out, "has no inbox queue");
    cleanup(&p).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_feed_that_stops_on_an_error_exits_with_it_instead_of_waiting_for_a_signal() {
    let (dir, p) = workload_dir("nobodyfeed", "");
    let db = TestDb::create().await;
    store(&db).await;
    // The topology has no consumer of this name: the feed is refused once it has started
    // listening, and its status server must not keep the process alive after that.
    let log = dir.path().join("feed.err");
    let args = ["feed", "--database", &db.url, "--broker", &nats()];
    let mut feed = common::daemon::Daemon::start_logging(
        dir.path(),
        &[
            &args[..],
            &["--consumer", "nobody", "--listen", "127.0.0.1:0"],
        ]
        .concat(),
        &[],
        &log,
    );
    let ended = feed.ended_within(Duration::from_secs(30));
    cleanup(&p).await;
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        ended.is_some(),
        "the feed still ran 30 s after its error: {said}"
    );
    assert_eq!(ended.unwrap().code(), Some(2), "{said}");
    assert!(said.contains("no consumer named \"nobody\""), "{said}");
}
