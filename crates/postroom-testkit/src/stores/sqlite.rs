//! The store half on SQLite: a temporary file with the outbox, inbox, parking lot and the
//! suite's business tables.

use crate::effects_table::EffectsTable;
use crate::fixture::StoreFixture;
use crate::table_queue::TableQueueFixture;
use async_trait::async_trait;
use postroom_core::{
    Envelope, Handled, MessageId, OutboxStore, OutgoingMessage, ParkingStore, Result,
};
use postroom_core::{InboxLookup, Transport};
use postroom_sqlite::{SqliteQueue, SqliteStore, inbox, map_error, outbox};
use sqlx::SqliteConnection;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A SQLite store in a temporary directory, removed on drop.
pub struct SqliteFixture {
    /// The store.
    pub store: SqliteStore,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SqliteFixture {
    /// A fresh file with the suite's business tables.
    pub async fn fresh() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("suite.db");
        let store = SqliteStore::open(&path).await.expect("open sqlite");
        sqlx::raw_sql(super::BUSINESS_TABLES)
            .execute(store.pool())
            .await
            .expect("business tables");
        Self {
            store,
            path,
            _dir: dir,
        }
    }
}

#[async_trait]
impl StoreFixture for SqliteFixture {
    async fn produce(&self, envelope: &Envelope, topic: &str) -> Result<()> {
        let mut tx = self.store.begin().await?;
        upsert_order!(envelope)
            .execute(&mut *tx)
            .await
            .map_err(map_error)?;
        outbox::enqueue(&mut tx, &OutgoingMessage::from_envelope(envelope, topic)).await?;
        tx.commit().await.map_err(map_error)
    }

    fn outbox(&self) -> Arc<dyn OutboxStore> {
        Arc::new(self.store.clone())
    }

    fn parking(&self) -> Arc<dyn ParkingStore> {
        Arc::new(self.store.clone())
    }

    async fn apply_effect(&self, consumer: &str, id: MessageId, key: &str) -> Result<Handled> {
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, consumer, id).await? {
            return Ok(Handled::Duplicate);
        }
        add_effect(&mut tx, consumer, key).await?;
        tx.commit().await.map_err(map_error)?;
        Ok(Handled::Applied)
    }

    async fn apply_effects(
        &self,
        consumer: &str,
        items: &[(MessageId, String)],
    ) -> Result<Vec<Handled>> {
        let mut tx = self.store.begin().await?;
        let new = inbox::claim_many(&mut tx, consumer, &super::ids(items)).await?;
        let (out, keys) = super::batch_outcomes(items, new);
        for key in keys {
            add_effect(&mut tx, consumer, key).await?;
        }
        tx.commit().await.map_err(map_error)?;
        Ok(out)
    }

    async fn effect_count(&self, consumer: &str, key: &str) -> Result<u64> {
        EffectsTable::on(self.store.pool())
            .count(consumer, key)
            .await
            .map_err(map_error)
    }
}

impl TableQueueFixture for SqliteFixture {
    fn address(&self) -> String {
        self.path.to_str().expect("a UTF-8 temporary path").into()
    }

    fn queue(&self, lease: Duration, poll_interval: Duration) -> Arc<dyn Transport> {
        queue_on(&self.store, lease, poll_interval)
    }

    async fn queue_at(
        address: &str,
        lease: Duration,
        poll_interval: Duration,
    ) -> Arc<dyn Transport> {
        let store = SqliteStore::open(address)
            .await
            .expect("open the fixture's file");
        queue_on(&store, lease, poll_interval)
    }

    fn inbox(&self) -> Arc<dyn InboxLookup> {
        Arc::new(self.store.clone())
    }
}

/// Count one more application of the effect `key` for `consumer`, on `conn` (the
/// transaction that claimed the message).
async fn add_effect(conn: &mut SqliteConnection, consumer: &str, key: &str) -> Result<()> {
    sqlx::query(super::ADD_EFFECT)
        .bind(consumer)
        .bind(key)
        .execute(conn)
        .await
        .map_err(map_error)?;
    Ok(())
}

/// The queue in `store`'s tables with the given `lease` and `poll_interval`.
fn queue_on(store: &SqliteStore, lease: Duration, poll_interval: Duration) -> Arc<dyn Transport> {
    let config = SqliteQueue::defaults()
        .lease(lease)
        .poll_interval(poll_interval);
    Arc::new(store.queue_with(config).expect("queue"))
}
