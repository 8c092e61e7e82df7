//! # postroom-sqlite
//!
//! postroom's embedded default: one SQLite file (WAL) holds the outbox, the inbox, the parking
//! lot and a durable queue whose retries become visible only after their delay. No server.
//!
//! A complete service on this store alone (producer, relay, consumer with the inbox, wired by
//! the `postroom` crate's `Service`) is `examples/src/bin/sqlite.rs` in the repository: copy it
//! and change the handler. The pieces, by hand:
//!
//! ```
//! # tokio_test();
//! # fn tokio_test() { tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use postroom_core::{Envelope, OutgoingMessage};
//! use postroom_sqlite::{SqliteStore, outbox, inbox};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = SqliteStore::open(dir.path().join("app.db")).await.unwrap();
//!
//! // Producer: the business row and the outbox row in one transaction.
//! let env = Envelope::builder("order.created", "orders").aggregate("order", "o-1", 1).build();
//! let mut tx = store.begin().await.unwrap();
//! sqlx::query("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY)").execute(&mut *tx).await.unwrap();
//! sqlx::query("INSERT INTO orders (id) VALUES ('o-1')").execute(&mut *tx).await.unwrap();
//! outbox::enqueue(&mut tx, &OutgoingMessage::from_envelope(&env, "order.created")).await.unwrap();
//! tx.commit().await.unwrap();
//!
//! // Consumer: claim the inbox row in the business transaction; a duplicate claims nothing.
//! let mut tx = store.begin().await.unwrap();
//! assert!(inbox::claim(&mut tx, "inventory", env.id).await.unwrap());
//! tx.commit().await.unwrap();
//! let mut tx = store.begin().await.unwrap();
//! assert!(!inbox::claim(&mut tx, "inventory", env.id).await.unwrap());
//! # }); }
//! ```

mod audit;
#[cfg(feature = "driver")]
pub mod driver;
mod error;
mod file;
pub mod inbox;
pub mod last_error;
pub mod outbox;
mod parking;
mod parking_archive;
mod pipeline;
pub mod queue;
mod schema;
mod time;

pub use error::map as map_error;
pub use file::create_private;
pub use last_error::SqliteLastErrors;
pub use postroom_core::QueueConfig;
pub use queue::{SqliteDelivery, SqliteQueue, SqliteSubscriber};
pub use schema::SCHEMA_VERSION;

use error::SqlxResultExt;
use postroom_core::{Error, ErrorKind, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The embedded store: outbox, inbox, parking lot and queue in one SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
    /// The turn of the store's own hot writes in this process (see
    /// [`SqliteStore::write_turn`]).
    writer: std::sync::Arc<tokio::sync::Mutex<()>>,
}

impl SqliteStore {
    /// Open (creating if needed) the database at `path`, in WAL mode with full sync, and
    /// apply migrations. Several processes may open the same file. A new file (and its
    /// `-wal` and `-shm` files) is readable and writable by its owner only (`0600`): it holds
    /// parked payloads; an existing file keeps its mode.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            return Err(Error::new(
                ErrorKind::Config,
                format!("database directory {} does not exist", dir.display()),
            ));
        }
        file::create_private(&path)?;
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options)
            .await
            // The driver's own class stays: a file that is not a database is invalid data
            // (permanent), a locked or unreadable one what SQLite says it is.
            .map_err(|e| {
                error::map(e).context(format!("cannot open database {}", path.display()))
            })?;
        schema::migrate(&pool).await.map_err(|e| {
            if e.kind() == ErrorKind::Config {
                Error::new(
                    ErrorKind::Config,
                    format!("cannot use database {}: {e}", path.display()),
                )
            } else {
                e
            }
        })?;
        Ok(Self {
            pool,
            path,
            writer: std::sync::Arc::default(),
        })
    }

    /// Wait for the turn of the store's own hot writes in this process (the relay's claims
    /// and marks, the embedded queue's publishes), and hold it for one write. SQLite lets one
    /// connection write at a time; another that tries waits in SQLite's busy handler, which
    /// sleeps 1, 2, 5, 10… ms between tries. The relay publishes into the embedded queue
    /// while it marks and claims; without turns one of the two slept through part of nearly
    /// every batch, and with turns they queue in order instead. The application's
    /// transactions ([`begin`](Self::begin)) and other processes still meet these writes in
    /// the busy handler.
    pub(crate) async fn write_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.writer.lock().await
    }

    /// The connection pool, for the application's own tables.
    #[must_use]
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The file path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Begin a write transaction (`BEGIN IMMEDIATE`, so a read-then-write transaction never
    /// fails on lock upgrade). Use it for the business write plus outbox or inbox rows.
    pub async fn begin(&self) -> Result<Transaction<'static, Sqlite>> {
        self.pool.begin_with("BEGIN IMMEDIATE").await.db()
    }

    /// The embedded queue on this file, with default settings.
    #[must_use]
    pub fn queue(&self) -> SqliteQueue {
        SqliteQueue::new(self.clone(), SqliteQueue::defaults()).expect("the defaults are valid")
    }

    /// The embedded queue on this file with `config` (refused when invalid: a prefetch of 0,
    /// a zero lease).
    pub fn queue_with(&self, config: QueueConfig) -> Result<SqliteQueue> {
        SqliteQueue::new(self.clone(), config)
    }
}
