//! A database that dies, not stops: a PostgreSQL cluster of the test's own holds the outbox,
//! the queue (`PgQueue`), the inbox and the effects; it is killed with SIGKILL (postmaster and
//! backends) while a producer, a relay and a consumer run, and started again on the same data.
//! Every committed row survives, nothing marked published before the crash is lost, each
//! message is applied exactly once, and the relay and the consumer recover by themselves.

mod common;

use common::{claim_and_apply, order};
use postroom_core::consumer::Consumer;
use postroom_core::{
    Handled, Handler, HandlerError, Incoming, MessageId, OutgoingMessage, Subscription, async_trait,
};
use postroom_postgres::{PgQueue, PgStore, TablePrefix, commit, outbox};
use postroom_testkit::cases::assert_none_lost;
use postroom_testkit::effects_table::EffectsTable;
use postroom_testkit::probe::outlasting_a_crash;
use postroom_testkit::servers::PgCluster;
use postroom_testkit::wait::until;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

struct Effects {
    store: PgStore,
}

#[async_trait]
impl Handler for Effects {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        claim_and_apply(
            &self.store,
            "hc",
            m.envelope.id,
            "INSERT INTO effects (id, n) VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET n = effects.n + 1",
        )
        .await
    }
}

async fn ids(store: &PgStore, sql: &str) -> Option<BTreeSet<MessageId>> {
    let rows: Vec<uuid::Uuid> = sqlx::query_scalar(sql).fetch_all(store.pool()).await.ok()?;
    Some(rows.into_iter().map(MessageId::from).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_killed_mid_run_loses_nothing_committed_and_everyone_recovers() {
    let db = Arc::new(PgCluster::start());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&db.url("postgres"))
        .await
        .unwrap();
    let store = PgStore::from_pool(pool, TablePrefix::default());
    store.migrate().await.unwrap();
    common::execute(
        store.pool(),
        "CREATE TABLE effects (id UUID PRIMARY KEY, n INT NOT NULL)",
    )
    .await;
    let queue = store
        .queue(
            PgQueue::defaults()
                .lease(Duration::from_secs(3))
                .poll_interval(Duration::from_millis(20)),
        )
        .unwrap();
    queue.bind("hc", &["order.*"]).await.unwrap();

    // A producer committing outbox rows all along; commits refused while the database is down
    // are fine, a commit that returned Ok must survive the crash.
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (store, producing) = (store.clone(), producing.clone());
        tokio::spawn(async move {
            let (mut committed, mut n) = (BTreeSet::new(), 0);
            while producing.load(Ordering::SeqCst) {
                let env = order(&format!("p{n}"), 1);
                n += 1;
                let m = OutgoingMessage::from_envelope(&env, "order.created");
                let written = async {
                    let mut tx = store.begin().await?;
                    outbox::enqueue(&mut tx, store.prefix(), &m).await?;
                    commit(tx).await
                }
                .await;
                if written.is_ok() {
                    committed.insert(env.id);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            committed
        })
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let relay = postroom_testkit::running::spawn_relay(
        Arc::new(store.outbox()),
        Arc::new(queue.clone()),
        "hc-relay",
        20,
        Duration::from_secs(3),
        rx.clone(),
    );
    let mut cfg = outlasting_a_crash("hc", "500ms");
    cfg.handler_timeout = Duration::from_secs(2);
    let effects = Arc::new(Effects {
        store: store.clone(),
    });
    let caps = postroom_core::Transport::capabilities(&queue);
    let consumer = Consumer::for_transport(cfg, effects, &caps).unwrap();
    let consuming = {
        let queue = queue.clone();
        tokio::spawn(async move {
            consumer
                .run_on(&queue, &Subscription::new("hc", &["order.*"]), rx)
                .await
        })
    };

    let applied = "SELECT id FROM effects";
    let published = "SELECT id FROM postroom_outbox WHERE published_at IS NOT NULL";
    until(
        Duration::from_secs(30),
        "the pipeline to run before the crash",
        async || ids(&store, applied).await.is_some_and(|s| s.len() >= 30),
    )
    .await;
    // Every row marked published before a crash must be applied.
    let mut before = std::collections::BTreeSet::new();
    for cycle in 1..=postroom_testkit::servers::hard_crash_cycles() {
        let published_now = ids(&store, published).await.unwrap();
        tokio::task::spawn_blocking({
            let db = db.clone();
            move || db.kill()
        })
        .await
        .unwrap();
        // Down for a moment, as a crashed host is.
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::spawn_blocking({
            let db = db.clone();
            move || db.start_again()
        })
        .await
        .unwrap();
        // The relay and the consumer were not restarted: they reconnect by themselves.
        until(
            Duration::from_secs(40),
            &format!("crash {cycle}: the relay to publish again"),
            async || {
                ids(&store, published)
                    .await
                    .is_some_and(|s| s.len() > published_now.len() + 20)
            },
        )
        .await;
        before.extend(published_now);
    }
    producing.store(false, Ordering::SeqCst);
    let committed = producer.await.unwrap();
    let in_outbox = ids(&store, "SELECT id FROM postroom_outbox").await.unwrap();
    assert_none_lost(
        &committed,
        &in_outbox,
        "committed outbox rows lost in the crash",
    );
    until(
        Duration::from_secs(40),
        "every row to be applied",
        async || {
            ids(&store, applied)
                .await
                .is_some_and(|s| s.len() == in_outbox.len())
        },
    )
    .await;
    let applied_ids = ids(&store, applied).await.unwrap();
    assert_eq!(
        applied_ids, in_outbox,
        "exactly the committed rows were applied"
    );
    EffectsTable::on(store.pool())
        .assert_none_lost_each_applied_once(
            &before,
            &applied_ids,
            "marked published before a crash but never applied",
        )
        .await;
    eprintln!(
        "{} committed, {} marked published before a crash, all applied once",
        in_outbox.len(),
        before.len()
    );
    stop.send(true).unwrap();
    relay.await.unwrap();
    consuming.await.unwrap().unwrap();
}
