//! # postroom-postgres
//!
//! postroom on PostgreSQL, for when one machine is not enough: the transactional outbox
//! written in your own transaction with relays claiming rows under leases and woken by
//! LISTEN/NOTIFY, the inbox, inbox-queue workers (seed 003), the parking lot with resumable
//! redrive, and `PgQueue`, a queue transport in tables. Every table is named with a
//! configurable prefix (default `postroom_`) and created by versioned migrations.
//!
//! ```no_run
//! # async fn demo() -> postroom_core::Result<()> {
//! use postroom_core::{Envelope, OutgoingMessage};
//! use postroom_postgres::{PgStore, inbox, outbox};
//!
//! let store = PgStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
//! store.migrate().await?;
//!
//! // Producer: the business row and the outbox row in one transaction (R2).
//! let env = Envelope::builder("order.created", "orders").aggregate("order", "o-1", 1).build();
//! let mut tx = store.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES ('o-1')").execute(&mut *tx).await.map_err(postroom_postgres::map_error)?;
//! let msg = OutgoingMessage::from_envelope(&env, "order.created");
//! outbox::enqueue(&mut tx, store.prefix(), &msg, &env.aggregate.key()).await?;
//! postroom_postgres::commit(tx).await?;
//!
//! // Consumer: claim the inbox row in the business transaction (R5).
//! let mut tx = store.begin().await?;
//! if inbox::claim(&mut tx, store.prefix(), "inventory", env.id).await? {
//!     // apply the effect here, in `tx`
//! }
//! postroom_postgres::commit(tx).await?;
//! # Ok(()) }
//! ```

pub mod error;
pub mod inbox;
pub mod inbox_queue;
pub mod migrate;
pub mod outbox;
pub mod parking;
pub mod queue;
pub mod schema;

pub use error::{commit, kind_of, map as map_error};
pub use inbox_queue::{InboxQueue, InboxQueueConfig, OrderedMode};
pub use migrate::migrate;
pub use outbox::PgOutbox;
pub use parking::PgParking;
pub use queue::{PgDelivery, PgQueue, PgSubscriber, QueueConfig};
pub use schema::TablePrefix;

use error::SqlxResultExt;
use postroom_core::Result;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, Transaction};
use std::time::Duration;

/// A pool and a table prefix: the handle every part of this crate is built from.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    prefix: TablePrefix,
}

impl PgStore {
    /// Connect to `url` with the default prefix and a pool of 10 connections.
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await
            .pg()?;
        Ok(Self::from_pool(pool, TablePrefix::default()))
    }

    /// Use an existing pool and prefix.
    #[must_use]
    pub fn from_pool(pool: PgPool, prefix: TablePrefix) -> Self {
        Self { pool, prefix }
    }

    /// Apply pending migrations; returns the versions applied now.
    pub async fn migrate(&self) -> Result<Vec<i32>> {
        migrate::migrate(&self.pool, &self.prefix).await
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The table prefix.
    #[must_use]
    pub fn prefix(&self) -> &TablePrefix {
        &self.prefix
    }

    /// Begin a transaction (for [`outbox::enqueue`] and [`inbox::claim`]).
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        self.pool.begin().await.pg()
    }

    /// The relays' side of the outbox.
    #[must_use]
    pub fn outbox(&self) -> PgOutbox {
        PgOutbox::new(self.pool.clone(), self.prefix.clone())
    }

    /// The parking lot.
    #[must_use]
    pub fn parking(&self) -> PgParking {
        PgParking::new(self.pool.clone(), self.prefix.clone())
    }

    /// The queue transport.
    pub fn queue(&self, config: QueueConfig) -> Result<PgQueue> {
        PgQueue::new(self.pool.clone(), self.prefix.clone(), config)
    }
}
