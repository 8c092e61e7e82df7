//! The shop on the embedded SQLite store: its dialect, and the file recreated for each run.

use super::ShopDb;
use super::kind::{ShopKind, concrete};
use super::sql::{Dialect, SqlShop, SqlStore};
use postroom_core::{Error, MessageId, OutgoingMessage, Result, async_trait};
use postroom_ops::registry::Store;
use postroom_ops::{Endpoint, OpsError, OpsResult};
use postroom_sqlite::{SqliteStore, inbox, map_error, outbox};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, Pool, Sqlite, SqliteConnection, Transaction};
use std::path::Path;
use std::sync::Arc;

#[async_trait]
impl SqlStore for SqliteStore {
    type Db = Sqlite;

    const DIALECT: Dialect = Dialect {
        table_count: "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = $1",
        // The file is recreated for each run (see `prepare`): only the business tables of a
        // reused file need emptying.
        empty_tables:
            "DELETE FROM shop_orders; DELETE FROM shop_stock; DELETE FROM shop_reservations;
            DELETE FROM shop_versions; DELETE FROM shop_effects; DELETE FROM shop_messages;
            DELETE FROM shop_faults; DELETE FROM shop_attempts; DELETE FROM shop_duplicates;
            DELETE FROM shop_crash; DELETE FROM shop_batches; DELETE FROM shop_deliveries;",
        // BEGIN IMMEDIATE already holds the whole database for the transaction.
        for_update: "",
        published_event: "SELECT o.message_id, o.route, o.headers, o.body FROM postroom_outbox o
            JOIN shop_orders s ON s.created_msg = o.message_id
            WHERE s.id = $1 AND o.published_at IS NOT NULL",
    };

    fn pool(&self) -> &Pool<Sqlite> {
        SqliteStore::pool(self)
    }

    async fn begin(&self) -> Result<Transaction<'static, Sqlite>> {
        SqliteStore::begin(self).await
    }

    async fn commit(&self, tx: Transaction<'static, Sqlite>) -> Result<()> {
        tx.commit().await.map_err(map_error)
    }

    async fn claim(
        &self,
        conn: &mut SqliteConnection,
        consumer: &str,
        id: MessageId,
    ) -> Result<bool> {
        inbox::claim(conn, consumer, id).await
    }

    async fn enqueue(&self, conn: &mut SqliteConnection, message: &OutgoingMessage) -> Result<()> {
        outbox::enqueue(conn, message).await
    }

    fn db_error(e: sqlx::Error) -> Error {
        map_error(e)
    }
}

/// The shop on SQLite files.
#[derive(Clone, Copy, Debug)]
pub struct SqliteShopKind;

#[async_trait(?Send)]
impl ShopKind for SqliteShopKind {
    fn store(&self) -> &'static str {
        postroom_ops::endpoint::SQLITE
    }

    /// Remove a previous demo (or soak) file; refuse to touch any other file. The file is
    /// looked at read-only, so a file that is not the demo's is left exactly as it was.
    async fn prepare(&self, database: &Endpoint) -> OpsResult {
        let path = database.file_path()?;
        if path.exists() {
            if !is_demo_file(&path).await {
                return Err(OpsError::usage(format!(
                    "{} exists and is not a postroom demo database; pass another --database",
                    path.display()
                )));
            }
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
        mark_as_demo_file(&path).await
    }

    fn open(&self, store: &dyn Store) -> OpsResult<Arc<dyn ShopDb>> {
        let s: &SqliteStore = concrete(store)?;
        Ok(Arc::new(SqlShop::new(s.clone())))
    }
}

/// Create `path` (private, like every postroom database file) holding the demo's marker
/// before anything else opens it, so that a run which stops before the shop's tables exist (a
/// bad broker URL, a broker nobody answers) leaves a file the next run knows as a demo file
/// and replaces. Where the file cannot be created, nothing is done here: opening the store
/// says why in its own words.
async fn mark_as_demo_file(path: &Path) -> OpsResult {
    if path
        .parent()
        .is_some_and(|d| !d.as_os_str().is_empty() && !d.is_dir())
        || postroom_sqlite::create_private(path).is_err()
    {
        return Ok(());
    }
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .map_err(map_error)?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS shop_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO shop_meta (key, value) VALUES ('created_by', 'postroom demo') ON CONFLICT (key) DO NOTHING",
    )
    .execute(&mut conn)
    .await
    .map_err(map_error)?;
    conn.close().await.map_err(map_error)?;
    Ok(())
}

async fn is_demo_file(path: &Path) -> bool {
    let Ok(mut conn) = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .connect()
        .await
    else {
        return false;
    };
    sqlx::query_scalar::<_, String>("SELECT value FROM shop_meta WHERE key = 'created_by'")
        .fetch_optional(&mut conn)
        .await
        .ok()
        .flatten()
        .is_some()
}
