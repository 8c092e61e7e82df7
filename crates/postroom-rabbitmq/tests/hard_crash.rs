//! A broker that dies, not stops: a RabbitMQ node of the test's own is killed with SIGKILL
//! while a producer, a relay and a consumer run, and started again on the same data. Nothing
//! the broker confirmed is lost, nothing unconfirmed was marked published (every row marked
//! published before the crash is applied), each message is applied exactly once (the inbox
//! absorbs the relay's republishes), and the relay and the consumer recover by themselves —
//! the same tasks, never restarted.

mod common;

use common::node::OwnRabbit;
use common::{TestRabbit, eventually, order, spawn_on_transport};
use postroom_core::{
    Consumer, Handled, Handler, HandlerError, Incoming, MessageId, OutgoingMessage, Subscription,
    Transport, async_trait,
};
use postroom_sqlite::SqliteStore;
use postroom_testkit::effects_table::EffectsTable;
use postroom_testkit::probe::outlasting_a_crash;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Claims the inbox and counts the effect, in one SQLite transaction.
struct Effects {
    store: SqliteStore,
}

#[async_trait]
impl Handler for Effects {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let mut tx = self.store.begin().await?;
        if !postroom_sqlite::inbox::claim(&mut tx, "hc", m.envelope.id).await? {
            return Ok(Handled::Duplicate);
        }
        sqlx::query(
            "INSERT INTO effects (id, n) VALUES (?, 1) ON CONFLICT (id) DO UPDATE SET n = n + 1",
        )
        .bind(m.envelope.id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(postroom_sqlite::map_error)?;
        tx.commit().await.map_err(postroom_sqlite::map_error)?;
        Ok(Handled::Applied)
    }
}

async fn ids(store: &SqliteStore, sql: &str) -> BTreeSet<MessageId> {
    sqlx::query_scalar::<_, String>(sql)
        .fetch_all(store.pool())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_mid_run_loses_nothing_confirmed_and_everyone_recovers() {
    let node = Arc::new(tokio::task::spawn_blocking(OwnRabbit::start).await.unwrap());
    let t = TestRabbit::on(&node.amqp_url(), &node.api_url(), "1s", |o| {
        o.reconnect_max = Duration::from_secs(2);
        o.confirm_timeout = Duration::from_secs(5);
    })
    .await;
    t.add_consumer("hc", &["order.created"]).await;
    let transport = Arc::new(t.transport());
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("hc.db")).await.unwrap();
    sqlx::query("CREATE TABLE effects (id TEXT PRIMARY KEY, n INTEGER NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();

    // A producer writing outbox rows all along (its store never goes down).
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (store, producing) = (store.clone(), producing.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while producing.load(Ordering::SeqCst) {
                let env = order(&format!("h{n}"), 1);
                let mut tx = store.begin().await.unwrap();
                postroom_sqlite::outbox::enqueue(
                    &mut tx,
                    &OutgoingMessage::from_envelope(&env, "order.created"),
                )
                .await
                .unwrap();
                tx.commit().await.unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            n
        })
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let relay = postroom_testkit::running::spawn_relay(
        Arc::new(store.clone()),
        transport.publisher(),
        "hc-relay",
        20,
        Duration::from_secs(10),
        rx.clone(),
    );
    let effects = Arc::new(Effects {
        store: store.clone(),
    });
    let consumer = Consumer::for_transport(
        outlasting_a_crash("hc", "1s"),
        effects,
        &transport.capabilities(),
    )
    .unwrap();
    let consuming = spawn_on_transport(
        consumer,
        &transport,
        Subscription::new("hc", &["order.created"]),
        rx,
    );

    let applied = "SELECT id FROM effects";
    let published = "SELECT message_id FROM postroom_outbox WHERE published_at IS NOT NULL";
    assert!(
        eventually(Duration::from_secs(30), || async {
            ids(&store, applied).await.len() >= 30
        })
        .await,
        "the pipeline runs before the crash"
    );
    // Every row marked published before a crash: the broker confirmed it, it must be applied.
    let mut confirmed_before_a_crash = BTreeSet::new();
    for cycle in 1..=postroom_testkit::servers::hard_crash_cycles() {
        tokio::task::spawn_blocking({
            let node = node.clone();
            move || node.kill()
        })
        .await
        .unwrap();
        let confirmed = ids(&store, published).await;
        eprintln!(
            "crash {cycle}: killed the node with {} rows marked published",
            confirmed.len()
        );
        tokio::task::spawn_blocking({
            let node = node.clone();
            move || node.start_again()
        })
        .await
        .unwrap();
        // The relay and the consumer carry on by themselves.
        assert!(
            eventually(Duration::from_secs(40), || async {
                ids(&store, published).await.len() > confirmed.len() + 20
            })
            .await,
            "crash {cycle}: the relay recovered and publishes again"
        );
        confirmed_before_a_crash.extend(confirmed);
    }
    producing.store(false, Ordering::SeqCst);
    let produced = producer.await.unwrap();
    assert!(
        eventually(Duration::from_secs(40), || async {
            ids(&store, applied).await.len() == produced
        })
        .await,
        "every produced message applied: {} of {produced}",
        ids(&store, applied).await.len()
    );
    EffectsTable::on(store.pool())
        .assert_none_lost_each_applied_once(
            &confirmed_before_a_crash,
            &ids(&store, applied).await,
            "confirmed before a crash but never applied",
        )
        .await;
    stop.send(true).unwrap();
    relay.await.unwrap();
    consuming.await.unwrap().unwrap();
    transport.close().await;
    drop(t);
}
