//! The shared conformance suite on the embedded SQLite default.

use postroom_core::{
    Envelope, Handled, MessageId, OutboxStore, OutgoingMessage, ParkingStore, Publisher, Result,
    RetryLadder, async_trait,
};
use postroom_sqlite::{
    SqliteQueue, SqliteStore, SqliteSubscriber, SubscribeOptions, inbox, outbox,
};
use postroom_testkit::{Backend, BackendCaps};
use std::sync::Arc;
use std::time::Duration;

struct SqliteBackend {
    store: SqliteStore,
    queue: SqliteQueue,
    _dir: tempfile::TempDir,
}

const LEASE: Duration = Duration::from_secs(1);

impl SqliteBackend {
    async fn fresh() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open(dir.path().join("conformance.db"))
            .await
            .expect("open sqlite");
        sqlx::raw_sql(
            "CREATE TABLE orders (id TEXT PRIMARY KEY, version INTEGER NOT NULL);
             CREATE TABLE effects (consumer TEXT NOT NULL, key TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (consumer, key));",
        )
        .execute(store.pool())
        .await
        .expect("business tables");
        let queue = store.queue();
        Self {
            store,
            queue,
            _dir: dir,
        }
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    type Sub = SqliteSubscriber;

    fn caps(&self) -> BackendCaps {
        BackendCaps {
            ladder: "300ms,600ms".parse::<RetryLadder>().unwrap(),
            redelivery_after: LEASE,
        }
    }

    async fn produce(&self, envelope: &Envelope, topic: &str) -> Result<()> {
        let mut tx = self.store.begin().await?;
        sqlx::query("INSERT INTO orders (id, version) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version")
            .bind(&envelope.aggregate.id)
            .bind(envelope.aggregate.version as i64)
            .execute(&mut *tx)
            .await
            .map_err(postroom_sqlite::map_error)?;
        outbox::enqueue(&mut tx, &OutgoingMessage::from_envelope(envelope, topic)).await?;
        tx.commit().await.map_err(postroom_sqlite::map_error)
    }

    fn outbox(&self) -> Arc<dyn OutboxStore> {
        Arc::new(self.store.clone())
    }

    fn parking(&self) -> Arc<dyn ParkingStore> {
        Arc::new(self.store.clone())
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        Arc::new(self.queue.clone())
    }

    async fn subscribe(&self, consumer: &str, topics: &[&str]) -> Result<SqliteSubscriber> {
        let opts = SubscribeOptions {
            prefetch: 1,
            lease: LEASE,
            ..SubscribeOptions::default()
        };
        self.queue.subscribe(consumer, topics, opts).await
    }

    async fn apply_effect(&self, consumer: &str, id: MessageId, key: &str) -> Result<Handled> {
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, consumer, id).await? {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO effects (consumer, key, n) VALUES (?, ?, 1) ON CONFLICT (consumer, key) DO UPDATE SET n = n + 1")
            .bind(consumer)
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(postroom_sqlite::map_error)?;
        tx.commit().await.map_err(postroom_sqlite::map_error)?;
        Ok(Handled::Applied)
    }

    async fn effect_count(&self, consumer: &str, key: &str) -> Result<u64> {
        let n: Option<i64> =
            sqlx::query_scalar("SELECT n FROM effects WHERE consumer = ? AND key = ?")
                .bind(consumer)
                .bind(key)
                .fetch_optional(self.store.pool())
                .await
                .map_err(postroom_sqlite::map_error)?;
        Ok(n.unwrap_or(0) as u64)
    }
}

postroom_testkit::conformance_suite!(SqliteBackend::fresh().await);
