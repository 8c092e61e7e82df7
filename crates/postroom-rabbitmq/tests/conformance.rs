//! The shared conformance suite on RabbitMQ (ack+publish retries through TTL stage queues,
//! parking queue ingested into the store), with SQLite for the outbox, parking store, inbox
//! and effect tables. Runs unchanged.

mod common;

use common::TestRabbit;
use postroom_core::{
    Envelope, Handled, MessageId, OutboxStore, OutgoingMessage, ParkingStore, Publisher, Result,
    RetryLadder, async_trait,
};
use postroom_rabbitmq::{ConfirmingPublisher, ParkingIngest, RabbitSubscriber, SubscriberOptions};
use postroom_sqlite::{SqliteStore, inbox, outbox};
use postroom_testkit::{Backend, BackendCaps};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

struct RabbitBackend {
    rabbit: TestRabbit,
    store: SqliteStore,
    publisher: Arc<ConfirmingPublisher>,
    ingesting: Mutex<HashSet<String>>,
    stop_ingest: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl RabbitBackend {
    async fn fresh() -> Self {
        let rabbit = TestRabbit::new("1s,2s").await;
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
        // The work exchange exists before any consumer subscribes.
        rabbit.topology().apply().await.expect("apply");
        let publisher = rabbit.publisher();
        let (stop_ingest, _) = watch::channel(false);
        Self {
            rabbit,
            store,
            publisher,
            ingesting: Mutex::new(HashSet::new()),
            stop_ingest,
            _dir: dir,
        }
    }
}

impl Drop for RabbitBackend {
    fn drop(&mut self) {
        let _ = self.stop_ingest.send(true);
    }
}

#[async_trait]
impl Backend for RabbitBackend {
    type Sub = RabbitSubscriber;

    fn caps(&self) -> BackendCaps {
        BackendCaps {
            ladder: "1s,2s".parse::<RetryLadder>().unwrap(),
            redelivery_after: Duration::from_secs(1),
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
        self.publisher.clone()
    }

    async fn subscribe(&self, consumer: &str, topics: &[&str]) -> Result<RabbitSubscriber> {
        let topology = self.rabbit.add_consumer(consumer, topics).await;
        if self.ingesting.lock().unwrap().insert(consumer.to_string()) {
            let ingest = ParkingIngest::new(
                self.rabbit.broker.clone(),
                topology.names(consumer),
                Arc::new(self.store.clone()),
            );
            let stop = self.stop_ingest.subscribe();
            tokio::spawn(async move { ingest.run(stop).await });
        }
        RabbitSubscriber::new(
            self.rabbit.broker.clone(),
            self.publisher.clone(),
            topology.config(),
            consumer,
            SubscriberOptions::new(2),
        )
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

postroom_testkit::conformance_suite!(RabbitBackend::fresh().await);
