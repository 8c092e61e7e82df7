//! The store half on PostgreSQL: a fresh database (dropped on drop) with the outbox, inbox,
//! parking lot under a non-default table prefix (to prove the prefix reaches every
//! statement) and the suite's business tables.

use crate::effects_table::EffectsTable;
use crate::fixture::StoreFixture;
use crate::servers::TestDb;
use crate::table_queue::TableQueueFixture;
use async_trait::async_trait;
use postroom_core::{
    Envelope, Handled, MessageId, OutboxStore, OutgoingMessage, ParkingStore, Result,
};
use postroom_core::{InboxLookup, Transport};
use postroom_postgres::{PgQueue, PgStore, TablePrefix, commit, inbox, map_error, outbox};
use std::sync::Arc;
use std::time::Duration;

/// The table prefix of the fixture's store.
const PREFIX: &str = "conf_";

/// A PostgreSQL store in a database of its own.
pub struct PgFixture {
    /// The store.
    pub store: PgStore,
    outbox: Arc<postroom_postgres::PgOutbox>,
    parking: Arc<postroom_postgres::PgParking>,
    /// The database (last: dropped after the pool handles above).
    pub db: TestDb,
}

impl PgFixture {
    /// A fresh database with a pool of `connections`, migrated under the prefix `conf_`.
    pub async fn fresh(connections: u32) -> Self {
        let db = TestDb::create().await;
        let store = PgStore::from_pool(
            db.pool(connections).await,
            TablePrefix::new(PREFIX).expect("prefix"),
        );
        store.migrate().await.expect("migrate");
        sqlx::raw_sql(super::BUSINESS_TABLES)
            .execute(store.pool())
            .await
            .expect("business tables");
        Self {
            outbox: Arc::new(store.outbox()),
            parking: Arc::new(store.parking()),
            store,
            db,
        }
    }

    /// The same fixture with an outbox that deletes each row once its publish is confirmed
    /// (`PgOutbox::delete_on_publish`) instead of marking it.
    #[must_use]
    pub fn deleting_published(mut self) -> Self {
        self.outbox = Arc::new(self.store.outbox().delete_on_publish());
        self
    }
}

#[async_trait]
impl StoreFixture for PgFixture {
    async fn produce(&self, envelope: &Envelope, topic: &str) -> Result<()> {
        let mut tx = self.store.begin().await?;
        upsert_order!(envelope)
            .execute(&mut *tx)
            .await
            .map_err(map_error)?;
        let msg = OutgoingMessage::from_envelope(envelope, topic);
        outbox::enqueue(&mut tx, self.store.prefix(), &msg).await?;
        commit(tx).await
    }

    fn outbox(&self) -> Arc<dyn OutboxStore> {
        self.outbox.clone()
    }

    fn parking(&self) -> Arc<dyn ParkingStore> {
        self.parking.clone()
    }

    async fn apply_effect(&self, consumer: &str, id: MessageId, key: &str) -> Result<Handled> {
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, self.store.prefix(), consumer, id).await? {
            commit(tx).await?;
            return Ok(Handled::Duplicate);
        }
        sqlx::query(super::ADD_EFFECT)
            .bind(consumer)
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(map_error)?;
        commit(tx).await?;
        Ok(Handled::Applied)
    }

    async fn apply_effects(
        &self,
        consumer: &str,
        items: &[(MessageId, String)],
    ) -> Result<Vec<Handled>> {
        let mut tx = self.store.begin().await?;
        let new =
            inbox::claim_many(&mut tx, self.store.prefix(), consumer, &super::ids(items)).await?;
        let (out, keys) = super::batch_outcomes(items, new);
        // One statement for the effects of the whole batch.
        sqlx::query(
            "INSERT INTO effects (consumer, key, n) SELECT $1, k, count(*) FROM unnest($2::text[]) AS k GROUP BY k
             ON CONFLICT (consumer, key) DO UPDATE SET n = effects.n + EXCLUDED.n",
        )
        .bind(consumer)
        .bind(&keys)
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
        commit(tx).await?;
        Ok(out)
    }

    async fn effect_count(&self, consumer: &str, key: &str) -> Result<u64> {
        EffectsTable::on(self.store.pool())
            .count(consumer, key)
            .await
            .map_err(map_error)
    }
}

impl TableQueueFixture for PgFixture {
    fn address(&self) -> String {
        self.db.url.clone()
    }

    fn queue(&self, lease: Duration, poll_interval: Duration) -> Arc<dyn Transport> {
        queue_on(&self.store, lease, poll_interval)
    }

    async fn queue_at(
        address: &str,
        lease: Duration,
        poll_interval: Duration,
    ) -> Arc<dyn Transport> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(address)
            .await
            .expect("connect to the fixture's database");
        let store = PgStore::from_pool(pool, TablePrefix::new(PREFIX).expect("prefix"));
        queue_on(&store, lease, poll_interval)
    }

    fn inbox(&self) -> Arc<dyn InboxLookup> {
        Arc::new(self.store.clone())
    }
}

/// The queue in `store`'s tables with the given `lease` and `poll_interval`.
fn queue_on(store: &PgStore, lease: Duration, poll_interval: Duration) -> Arc<dyn Transport> {
    let config = PgQueue::defaults()
        .lease(lease)
        .poll_interval(poll_interval);
    Arc::new(store.queue(config).expect("queue"))
}
