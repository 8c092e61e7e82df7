//! A consumer process killed after its transaction committed and before its ack: the process
//! exits at the crash point (its heartbeats die with it), the server redelivers the copy
//! after `ack_wait`, and the next consumer's inbox absorbs it: one effect.
//!
//! The child is this same test run again with `POSTROOM_NATS_KILL_*` set.

mod common;

use common::probe::{Mode, Probe};
use common::{TestNats, bind_to_orders, eventually, order};
use postroom_core::{Consumer, ConsumerConfig, EnvelopeDecoder, Subscription, Transport};
use postroom_sqlite::SqliteStore;
use postroom_testkit::cases::publish_to;
use postroom_testkit::child::this_test_again;
use postroom_testkit::probe::store_at;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const TEST: &str = "a_consumer_killed_after_commit_before_ack_makes_one_effect";

/// Consume from the workload `prefix` with a probe that claims the inbox and counts the
/// effect in the SQLite file `db`, until `until` holds of the probe.
async fn consume(prefix: &str, db: &str, until: impl Fn(&Probe) -> bool) -> Arc<Probe> {
    let conn = common::connect(&common::nats_url()).await;
    let mut cfg = postroom_nats::NatsConfig::new(prefix);
    cfg.ack_wait = Duration::from_secs(2);
    cfg.pull_expires = Duration::from_secs(5);
    cfg.heartbeat = Duration::from_secs(1);
    cfg.max_age = Duration::from_secs(3600);
    cfg.parking_max_age = Duration::from_secs(3600);
    let transport = postroom_nats::NatsTransport::new(conn, cfg).unwrap();
    let sub = transport
        .subscribe(&Subscription::new("kill", &["order.created"]).prefetch(1))
        .await
        .unwrap();
    let effect = Probe::with_inbox(store_at(Path::new(db)).await, "kill", Mode::Ok);
    let mut c = ConsumerConfig::new(
        "kill",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    c.concurrency = 1;
    c.handler_timeout = Duration::from_secs(10);
    let consumer = Consumer::for_transport(c, effect.clone(), &transport.capabilities()).unwrap();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move { consumer.run(sub, rx).await });
    assert!(eventually(Duration::from_secs(30), || async { until(&effect) }).await);
    stop.send(true)
        .expect("the consumer is still listening for its stop");
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the consumer stops within 30 s")
        .expect("the consumer task did not panic");
    effect
}

async fn effects(db: &str) -> i64 {
    let store = SqliteStore::open(db).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM effects")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_after_commit_before_ack_makes_one_effect() {
    if let (Ok(prefix), Ok(db)) = (
        std::env::var("POSTROOM_NATS_KILL_PREFIX"),
        std::env::var("POSTROOM_NATS_KILL_DB"),
    ) {
        // The child: handles the copy, commits, and dies at the crash point before its ack.
        consume(&prefix, &db, |_| false).await;
        unreachable!("the crash point ends the process");
    }
    let nats = TestNats::new().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kill.db").display().to_string();
    store_at(Path::new(&db)).await;
    let transport = nats.transport(nats.config());
    bind_to_orders(&transport, "kill").await;
    let env = order("k1", 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    let status = this_test_again(TEST)
        .env("POSTROOM_NATS_KILL_PREFIX", &nats.prefix)
        .env("POSTROOM_NATS_KILL_DB", &db)
        .env("POSTROOM_FAILPOINTS", "consumer.before_ack=exit(9)")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(9), "the child died at the crash point");
    assert_eq!(effects(&db).await, 1, "the child committed its effect");
    let effect = consume(&nats.prefix, &db, |e| e.duplicates() >= 1).await;
    assert_eq!(effect.duplicates(), 1, "the redelivery was absorbed");
    assert_eq!(effects(&db).await, 1, "one effect");
}
