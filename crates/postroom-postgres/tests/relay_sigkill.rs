//! Two relay processes on one outbox, one killed with SIGKILL in the middle of a batch: every
//! message is published, per-aggregate order holds, and the republished copies carry the same
//! id, so the real consumer loop's inbox absorbs them.
//!
//! The relays publish to the queue transport in PostgreSQL tables and log each confirmed
//! publish (the order the broker saw). The consumer is the library's own loop on that queue,
//! its handler claiming the inbox and applying the effect in one transaction.
//!
//! The relay processes are this test binary itself, re-run with `two_relays_one_killed_mid_batch` as the
//! only test and the database URL in the environment.

mod common;

use common::claim_and_apply;
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::failpoint::{self, Action};
use postroom_core::{
    BacklogProbe, Envelope, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming, MessageId,
    OutboxRelay, OutgoingMessage, Publisher, RelayConfig, Result, Transport, async_trait,
    message::headers as h,
};
use postroom_postgres::{PgQueue, PgStore, TablePrefix, commit, map_error, outbox};
use postroom_testkit::child::this_test_again;
use postroom_testkit::servers::TestDb;
use postroom_testkit::wait::until as wait_until;
use sqlx::{PgPool, Row};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const AGGREGATES: usize = 12;
const VERSIONS: u64 = 12;
const WORKER_URL: &str = "POSTROOM_RELAY_WORKER_URL";
const WORKER_ID: &str = "POSTROOM_RELAY_WORKER_ID";

/// The queue transport's publisher, logging each confirmed publish to `broker_log` (after
/// the queue's commit: a relay killed between the two leaves at most one copy unlogged).
/// Each publish takes a few milliseconds, so a batch is long enough to be killed inside.
struct LogPublisher {
    pool: PgPool,
    queue: PgQueue,
    relay: String,
}

#[async_trait]
impl Publisher for LogPublisher {
    async fn publish(&self, m: &OutgoingMessage) -> Result<()> {
        tokio::time::sleep(Duration::from_millis(15)).await;
        self.queue.publish(m).await?;
        let env: Envelope = serde_json::from_slice(&m.body).expect("envelope body");
        sqlx::query("INSERT INTO broker_log (relay, message_id, aggregate_key, version) VALUES ($1, $2, $3, $4)")
            .bind(&self.relay)
            .bind(m.id.as_uuid())
            .bind(m.headers.get(h::AGGREGATE_KEY).cloned().unwrap_or_default())
            .bind(i64::try_from(env.aggregate.version).unwrap())
            .execute(&self.pool)
            .await
            .map_err(map_error)?;
        Ok(())
    }
}

/// A relay process: this test binary re-run by `two_relays_one_killed_mid_batch` with the
/// worker variables set.
fn relay_worker(url: String, relay_id: String) {
    let relay_id_is_doomed = relay_id == "doomed";
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let pool = common::pool_at(&url, 3).await;
        let store = PgStore::from_pool(pool.clone(), TablePrefix::default());
        let publisher = Arc::new(LogPublisher {
            pool,
            queue: store.queue(PgQueue::defaults()).unwrap(),
            relay: relay_id.clone(),
        });
        let config = RelayConfig {
            relay_id,
            batch_size: 10,
            lease: Duration::from_secs(2),
            idle_wait: Duration::from_millis(200),
            retry_after: Duration::from_millis(100),
            retention: None,
            lanes: 1,
        };
        if relay_id_is_doomed {
            // Held before its first mark until the SIGKILL arrives: its first batch is
            // confirmed and logged, and no row it logged is ever marked. (Held at a later
            // batch, the test's "a logged row is unmarked" could be seen on an earlier batch
            // just before its mark, and a kill landing after that mark, before the next batch
            // logged anything, left nothing to republish.)
            failpoint::arm_for(
                failpoint::RELAY_BEFORE_MARK,
                "doomed",
                Action::Call(Arc::new(|| Box::pin(std::future::pending::<()>()))),
                0,
                None,
            );
        }
        let relay = OutboxRelay::new(Arc::new(store.outbox()), publisher, config);
        let (_never, rx) = tokio::sync::watch::channel(false);
        relay.run(rx).await;
    });
}

/// The consumer's handler: claim the inbox and apply the effect in one transaction; every
/// delivery is counted.
struct InboxEffect {
    store: PgStore,
    deliveries: Mutex<Vec<MessageId>>,
}

#[async_trait]
impl Handler for InboxEffect {
    async fn handle(&self, m: &Incoming) -> std::result::Result<Handled, HandlerError> {
        self.deliveries.lock().unwrap().push(m.envelope.id);
        claim_and_apply(
            &self.store,
            "inventory",
            m.envelope.id,
            "INSERT INTO effects (message_id) VALUES ($1)",
        )
        .await
    }
}

fn spawn_relay(url: &str, id: &str) -> Child {
    this_test_again("two_relays_one_killed_mid_batch")
        .env(WORKER_URL, url)
        .env(WORKER_ID, id)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn relay process")
}

async fn scalar(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[test]
fn two_relays_one_killed_mid_batch() {
    if let (Ok(url), Ok(id)) = (std::env::var(WORKER_URL), std::env::var(WORKER_ID)) {
        // This process is one of the relays.
        relay_worker(url, id);
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(two_relays_scenario());
}

async fn two_relays_scenario() {
    let db = TestDb::create().await;
    let pool = db.pool(4).await;
    let store = PgStore::from_pool(pool.clone(), TablePrefix::default());
    store.migrate().await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE broker_log (seq BIGSERIAL PRIMARY KEY, relay TEXT NOT NULL, message_id UUID NOT NULL,
                                  aggregate_key TEXT NOT NULL, version BIGINT NOT NULL);
         CREATE TABLE effects (message_id UUID PRIMARY KEY);",
    )
    .execute(&pool)
    .await
    .unwrap();

    // Produce: one transaction per version round, all aggregates in a batch.
    let mut ids: BTreeMap<(String, u64), MessageId> = BTreeMap::new();
    for v in 1..=VERSIONS {
        let mut batch = Vec::new();
        for a in 0..AGGREGATES {
            let env = Envelope::builder("order.created", "sigkill")
                .aggregate("order", format!("a{a}"), v)
                .build();
            ids.insert((env.aggregate.key(), v), env.id);
            batch.push(OutgoingMessage::from_envelope(&env, "orders"));
        }
        let mut tx = store.begin().await.unwrap();
        outbox::enqueue_batch(&mut tx, store.prefix(), &batch)
            .await
            .unwrap();
        commit(tx).await.unwrap();
    }
    let total = ids.len() as i64;

    // The real consumer loop on the queue the relays publish to.
    let queue = store.queue(PgQueue::defaults().prefetch(8)).unwrap();
    let sub = queue.subscribe("inventory", &["orders"]).await.unwrap();
    let handler = Arc::new(InboxEffect {
        store: store.clone(),
        deliveries: Mutex::new(Vec::new()),
    });
    let mut cfg = ConsumerConfig::new(
        "inventory",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.concurrency = 4;
    let consumer = Consumer::for_transport(cfg, handler.clone(), &queue.capabilities()).unwrap();
    let stats = consumer.stats();
    let (stop_consumer, consumer_rx) = tokio::sync::watch::channel(false);
    let consumer_task = tokio::spawn(async move { consumer.run(sub, consumer_rx).await });

    let mut doomed = spawn_relay(&db.url, "doomed");
    let mut survivor = spawn_relay(&db.url, "survivor");
    // Kill the doomed relay once it has published a row it has not marked (it never marks).
    wait_until(
        Duration::from_secs(60),
        "the doomed relay to be mid-batch",
        async || {
            scalar(
                &pool,
                "SELECT count(*) FROM broker_log l JOIN postroom_outbox o ON o.id = l.message_id
             WHERE l.relay = 'doomed' AND o.published_at IS NULL AND o.locked_by = 'doomed'",
            )
            .await
                > 0
        },
    )
    .await;
    doomed.kill().expect("SIGKILL the doomed relay");
    let _ = doomed.wait();
    let at_kill = scalar(
        &pool,
        "SELECT count(*) FROM postroom_outbox WHERE published_at IS NULL",
    )
    .await;
    assert!(at_kill > 0, "the doomed relay died with work left");

    wait_until(
        Duration::from_secs(90),
        "the survivor to drain the outbox",
        async || {
            scalar(
                &pool,
                "SELECT count(*) FROM postroom_outbox WHERE published_at IS NULL",
            )
            .await
                == 0
        },
    )
    .await;
    survivor.kill().unwrap();
    let _ = survivor.wait();

    let log: Vec<(String, uuid::Uuid, String, i64)> = sqlx::query(
        "SELECT relay, message_id, aggregate_key, version FROM broker_log ORDER BY seq",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect();
    let relays: BTreeSet<&str> = log.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(relays.len(), 2, "both relays published");

    // Every message published; copies carry the id of the original.
    for l in &log {
        let want = ids
            .get(&(l.2.clone(), u64::try_from(l.3).unwrap()))
            .copied()
            .expect("a produced message");
        assert_eq!(
            MessageId::from(l.1),
            want,
            "a republished copy carries the original id"
        );
    }
    let distinct: BTreeSet<uuid::Uuid> = log.iter().map(|l| l.1).collect();
    assert_eq!(distinct.len() as i64, total, "every message published");
    assert!(
        log.len() as i64 > total,
        "the killed relay's unmarked rows were published again"
    );

    // Per aggregate, versions never go back: n+1 is never published before a copy of n.
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    for l in &log {
        let prev = last.insert(l.2.as_str(), l.3).unwrap_or(0);
        assert!(
            l.3 == prev || l.3 == prev + 1,
            "{}: version {} published after {}",
            l.2,
            l.3,
            prev
        );
    }

    // The consumer loop handles every copy: the inbox absorbs the republished ones.
    wait_until(
        Duration::from_secs(90),
        "the consumer to handle every copy",
        async || {
            let b = BacklogProbe::backlog(&queue, "inventory").await.unwrap();
            stats.snapshot().applied == total as u64 && b.ready + b.unacked + b.delayed == 0
        },
    )
    .await;
    stop_consumer.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(30), consumer_task)
        .await
        .expect("the consumer loop stops within 30 s")
        .expect("the consumer loop ends without a panic");
    let s = stats.snapshot();
    let deliveries = handler.deliveries.lock().unwrap().clone();
    assert_eq!(s.applied, total as u64, "each message applied once");
    assert_eq!(
        s.applied + s.duplicates,
        deliveries.len() as u64,
        "every delivery applied or absorbed"
    );
    assert!(
        s.duplicates >= 1,
        "the republished copies reached the consumer"
    );
    // Each logged publish is a copy in the queue; the killed relay may have left one more
    // (published, killed before logging it).
    assert!(
        (log.len()..=log.len() + 1).contains(&deliveries.len()),
        "{} deliveries for {} logged publishes",
        deliveries.len(),
        log.len()
    );
    let delivered: BTreeSet<MessageId> = deliveries.iter().copied().collect();
    assert_eq!(delivered.len() as i64, total, "every message delivered");
    assert_eq!(s.settle_failures, 0);
    assert!(s.parked_by_code.is_empty(), "nothing parked: {s:?}");
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM effects").await,
        total,
        "one effect per message"
    );
}
