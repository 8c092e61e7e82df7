//! The shop on PostgreSQL. The postroom tables use the prefix [`PREFIX`], so the demo and
//! soak never touch an application's own postroom tables.

use super::ShopDb;
use super::kind::{ShopKind, concrete};
use super::sql::{Dialect, SqlShop, SqlStore};
use postroom_core::{Error, MessageId, OutgoingMessage, Result, async_trait};
use postroom_ops::OpsResult;
use postroom_ops::registry::Store;
use postroom_postgres::{PgStore, commit, inbox, map_error, outbox};
use sqlx::{PgConnection, Pool, Postgres, Transaction};
use std::sync::Arc;

/// Table prefix of the postroom tables the demo and soak use on PostgreSQL (the dialect's
/// statements spell it out).
pub const PREFIX: &str = "postroom_demo_";

#[async_trait]
impl SqlStore for PgStore {
    type Db = Postgres;

    const DIALECT: Dialect = Dialect {
        table_count: "SELECT COUNT(*) FROM pg_catalog.pg_tables
            WHERE schemaname = current_schema() AND tablename = $1",
        // The database outlives a run: empty the business tables and the demo's postroom tables.
        empty_tables:
            "TRUNCATE shop_orders, shop_stock, shop_reservations, shop_versions, shop_effects,
                shop_messages, shop_faults, shop_attempts, shop_duplicates, shop_crash, shop_batches,
                shop_deliveries;
            TRUNCATE postroom_demo_outbox, postroom_demo_inbox, postroom_demo_parked,
                postroom_demo_redrive_runs, postroom_demo_redrive_items, postroom_demo_queue;",
        for_update: " FOR UPDATE",
        published_event:
            "SELECT o.id::text, o.route, o.headers::text, o.body FROM postroom_demo_outbox o
            JOIN shop_orders s ON s.created_msg = o.id::text
            WHERE s.id = $1 AND o.published_at IS NOT NULL",
    };

    fn pool(&self) -> &Pool<Postgres> {
        PgStore::pool(self)
    }

    async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        PgStore::begin(self).await
    }

    async fn commit(&self, tx: Transaction<'static, Postgres>) -> Result<()> {
        commit(tx).await
    }

    async fn claim(&self, conn: &mut PgConnection, consumer: &str, id: MessageId) -> Result<bool> {
        inbox::claim(conn, self.prefix(), consumer, id).await
    }

    async fn enqueue(&self, conn: &mut PgConnection, message: &OutgoingMessage) -> Result<()> {
        outbox::enqueue(conn, self.prefix(), message).await
    }

    fn db_error(e: sqlx::Error) -> Error {
        map_error(e)
    }
}

/// The shop on PostgreSQL databases.
#[derive(Clone, Copy, Debug)]
pub struct PgShopKind;

#[async_trait(?Send)]
impl ShopKind for PgShopKind {
    fn store(&self) -> &'static str {
        "postgres"
    }

    fn table_prefix(&self) -> Option<&'static str> {
        Some(PREFIX)
    }

    fn open(&self, store: &dyn Store) -> OpsResult<Arc<dyn ShopDb>> {
        let s: &PgStore = concrete(store)?;
        Ok(Arc::new(SqlShop::new(s.clone())))
    }
}

#[cfg(test)]
#[test]
fn the_dialect_names_the_demo_prefix() {
    let d = <PgStore as SqlStore>::DIALECT;
    assert!(d.empty_tables.contains(&format!("{PREFIX}outbox")));
    assert!(d.published_event.contains(&format!("{PREFIX}outbox")));
}
