//! The shared conformance suite, unchanged, against a real PostgreSQL: the outbox, inbox and
//! parking lot of this crate with `PgQueue` as the transport. Each test gets its own database.

mod support;

use postroom_core::{
    Envelope, Handled, MessageId, OutboxStore, OutgoingMessage, ParkingStore, Publisher, Result,
    RetryLadder, async_trait,
};
use postroom_postgres::{
    PgQueue, PgStore, PgSubscriber, QueueConfig, TablePrefix, commit, inbox, map_error, outbox,
};
use postroom_testkit::{Backend, BackendCaps};
use std::sync::Arc;
use std::time::Duration;
use support::TestDb;

/// The lease on queue rows, hence how soon a dead consumer's delivery comes back.
const LEASE: Duration = Duration::from_secs(1);

struct PgBackend {
    store: PgStore,
    outbox: Arc<postroom_postgres::PgOutbox>,
    parking: Arc<postroom_postgres::PgParking>,
    queue: Arc<PgQueue>,
    // Last: dropped after the pool handles above.
    _db: TestDb,
}

async fn fresh() -> PgBackend {
    let db = TestDb::create().await;
    // A non-default prefix, to prove the prefix reaches every statement.
    let store = PgStore::from_pool(db.pool(8).await, TablePrefix::new("conf_").unwrap());
    store.migrate().await.expect("migrate");
    sqlx::raw_sql(
        "CREATE TABLE orders (id TEXT PRIMARY KEY, version BIGINT NOT NULL);
         CREATE TABLE effects (consumer TEXT NOT NULL, key TEXT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (consumer, key));",
    )
    .execute(store.pool())
    .await
    .expect("business tables");
    let queue = store
        .queue(
            QueueConfig::default()
                .lease(LEASE)
                .poll_interval(Duration::from_millis(20)),
        )
        .unwrap();
    PgBackend {
        outbox: Arc::new(store.outbox()),
        parking: Arc::new(store.parking()),
        queue: Arc::new(queue),
        store,
        _db: db,
    }
}

#[async_trait]
impl Backend for PgBackend {
    type Sub = PgSubscriber;

    fn caps(&self) -> BackendCaps {
        BackendCaps {
            ladder: RetryLadder::new(vec![Duration::from_millis(500), Duration::from_secs(1)])
                .unwrap(),
            redelivery_after: LEASE,
        }
    }

    async fn produce(&self, envelope: &Envelope, topic: &str) -> Result<()> {
        let mut tx = self.store.begin().await?;
        sqlx::query(
            "INSERT INTO orders (id, version) VALUES ($1, $2)
             ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version",
        )
        .bind(&envelope.aggregate.id)
        .bind(i64::try_from(envelope.aggregate.version).unwrap())
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        let msg = OutgoingMessage::from_envelope(envelope, topic);
        outbox::enqueue(
            &mut tx,
            self.store.prefix(),
            &msg,
            &envelope.aggregate.key(),
        )
        .await?;
        commit(tx).await
    }

    fn outbox(&self) -> Arc<dyn OutboxStore> {
        self.outbox.clone()
    }

    fn parking(&self) -> Arc<dyn ParkingStore> {
        self.parking.clone()
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.queue.clone()
    }

    async fn subscribe(&self, consumer: &str, topics: &[&str]) -> Result<PgSubscriber> {
        self.queue.subscribe(consumer, topics).await
    }

    async fn apply_effect(&self, consumer: &str, id: MessageId, key: &str) -> Result<Handled> {
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, self.store.prefix(), consumer, id).await? {
            commit(tx).await?;
            return Ok(Handled::Duplicate);
        }
        sqlx::query(
            "INSERT INTO effects (consumer, key, n) VALUES ($1, $2, 1)
             ON CONFLICT (consumer, key) DO UPDATE SET n = effects.n + 1",
        )
        .bind(consumer)
        .bind(key)
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        commit(tx).await?;
        Ok(Handled::Applied)
    }

    async fn effect_count(&self, consumer: &str, key: &str) -> Result<u64> {
        let n: Option<i64> =
            sqlx::query_scalar("SELECT n FROM effects WHERE consumer = $1 AND key = $2")
                .bind(consumer)
                .bind(key)
                .fetch_optional(self.store.pool())
                .await
                .map_err(map_error)?;
        Ok(n.map_or(0, |n| u64::try_from(n).unwrap()))
    }
}

postroom_testkit::conformance_suite!(fresh().await);
