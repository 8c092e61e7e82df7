//! The WAL relay through the front door: a service on a PostgreSQL cluster of the test's own
//! (`wal_level = logical`) runs `relay_from_wal` beside its consumer; committed outbox rows
//! are applied once each, a rolled-back producer publishes nothing, and no outbox row is
//! written after its insert. Where logical decoding is not there, `start` refuses and says
//! what to set.

use postroom::{
    Contract, Envelope, Handled, HandlerError, Message, OutgoingMessage, Service, TypedHandler,
    async_trait, consumer,
};
use postroom_postgres::PgStore;
use postroom_postgres::wal::WalRelayConfig;
use postroom_testkit::servers::PgCluster;
use postroom_testkit::wait::eventually;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Serialize, Deserialize)]
struct OrderCreated {
    order_id: String,
}

impl Contract for OrderCreated {
    const TYPE: &'static str = "order.created";
}

struct Reserve {
    store: PgStore,
}

#[async_trait]
impl TypedHandler<OrderCreated> for Reserve {
    async fn handle(&self, m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
        let mut tx = self.store.begin().await?;
        if !postroom_postgres::inbox::claim(&mut tx, self.store.prefix(), "inventory", m.id())
            .await?
        {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO reservations (order_id) VALUES ($1)")
            .bind(&m.data.order_id)
            .execute(&mut *tx)
            .await?;
        postroom_postgres::commit(tx).await?;
        Ok(Handled::Applied)
    }
}

fn wal_config(relay_id: &str) -> WalRelayConfig {
    WalRelayConfig {
        relay_id: relay_id.into(),
        retention: None,
        ..WalRelayConfig::default()
    }
}

async fn produce(store: &PgStore, ids: impl Iterator<Item = String>, commit: bool) {
    let mut tx = store.begin().await.unwrap();
    for id in ids {
        let env = Envelope::builder(OrderCreated::TYPE, "tests")
            .aggregate("order", &id, 1)
            .data(serde_json::json!({ "order_id": id }))
            .build();
        let msg = OutgoingMessage::from_envelope(&env, OrderCreated::TYPE);
        postroom_postgres::outbox::enqueue(&mut tx, store.prefix(), &msg)
            .await
            .unwrap();
    }
    if commit {
        postroom_postgres::commit(tx).await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_relaying_from_the_wal_applies_each_committed_message_once() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let service = Service::builder()
        .database(&cluster.url("postgres"))
        .open()
        .await
        .unwrap();
    let store = service.store::<PgStore>().unwrap().clone();
    sqlx::query("CREATE TABLE reservations (order_id TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let running = service
        .consumer(consumer::<OrderCreated>(
            "inventory",
            Reserve {
                store: store.clone(),
            },
        ))
        .relay_from_wal(wal_config("facade-wal"))
        .start()
        .await
        .expect("start with the WAL relay");
    produce(&store, (0..40).map(|i| format!("c-{i}")), true).await;
    produce(&store, (0..10).map(|i| format!("r-{i}")), false).await;
    produce(&store, (40..50).map(|i| format!("c-{i}")), true).await;
    let pool = store.pool().clone();
    let applied = || {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (i64, i64, i64)>(
                "SELECT count(*), count(DISTINCT order_id), count(*) FILTER (WHERE order_id LIKE 'r-%') FROM reservations",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!(
        eventually(Duration::from_secs(60), || async {
            applied().await.0 >= 50
        })
        .await,
        "every committed order applied; got {:?}",
        applied().await
    );
    assert!(running.is_running());
    running.shutdown().await;
    assert_eq!(
        applied().await,
        (50, 50, 0),
        "each committed order applied once, no rolled-back one"
    );
    let written: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM postroom_outbox WHERE published_at IS NOT NULL OR publish_attempts > 0 OR locked_by IS NOT NULL",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(written, 0, "the WAL relay writes nothing per message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_logical_decoding_the_wal_relay_is_refused_at_start_saying_what_to_set() {
    let cluster =
        tokio::task::spawn_blocking(|| PgCluster::start_with(&[("wal_level", "replica")]))
            .await
            .unwrap();
    let err = Service::builder()
        .database(&cluster.url("postgres"))
        .open()
        .await
        .unwrap()
        .relay_from_wal(wal_config("refused"))
        .start()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("wal_level"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let sqlite = dir.path().join("wal.db");
    let err = Service::builder()
        .database(sqlite.to_str().unwrap())
        .open()
        .await
        .unwrap()
        .relay_from_wal(wal_config("refused"))
        .start()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("postgres://"), "{err}");
}
