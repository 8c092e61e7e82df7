//! An open store, as a driver hands it out: the outbox, the parking lot, the inboxes and a
//! queue in its tables.

use crate::error::{Error, Result};
use crate::inbox::InboxLookup;
use crate::inbox_feed::InboxFeed;
use crate::outbox::OutboxStore;
use crate::parking::{LastErrorLog, ParkingStore};
use crate::transport::{QueueConfig, Transport};
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// How to open a store.
#[derive(Clone, Debug, Default)]
pub struct StoreOptions {
    /// Table prefix (stores with prefixed tables; `None`: the store's default).
    pub table_prefix: Option<String>,
    /// Refuse to create a store that does not exist yet (a SQLite file that is not there).
    pub must_exist: bool,
    /// Connections in the store's pool (`None`: the store's default).
    pub max_connections: Option<u32>,
}

/// Settings of a store's queue in tables.
#[derive(Clone, Copy, Debug)]
pub struct QueueOptions {
    /// How long a delivery stays leased before it is delivered again.
    pub lease: Duration,
    /// Deliveries handed out ahead.
    pub prefetch: usize,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            prefetch: 8,
        }
    }
}

impl QueueOptions {
    /// `config` (a store's queue defaults) with this lease and prefetch.
    #[must_use]
    pub fn apply(&self, config: QueueConfig) -> QueueConfig {
        config.lease(self.lease).prefetch(self.prefetch)
    }
}

/// An open store: outbox, parking lot, and a queue in its tables.
pub trait Store: Send + Sync + 'static {
    /// The driver's name (`sqlite`, `postgres`).
    fn driver(&self) -> &'static str;
    /// Where it is (redacted).
    fn location(&self) -> String;
    /// The relays' side of the outbox.
    fn outbox(&self) -> Arc<dyn OutboxStore>;
    /// The relays' side of the outbox, deleting each row once its publish is confirmed
    /// instead of marking it published; `None` where the store only marks (its published rows
    /// go at the retention purge).
    fn deleting_outbox(&self) -> Option<Arc<dyn OutboxStore>> {
        None
    }
    /// The parking lot.
    fn parking(&self) -> Arc<dyn ParkingStore>;
    /// The queue in this store's tables, as a transport.
    fn queue(&self, options: &QueueOptions) -> Result<Arc<dyn Transport>>;
    /// The consumers' inboxes in this store, for redrive to ask what is already applied.
    fn inbox(&self) -> Option<Arc<dyn InboxLookup>> {
        None
    }
    /// Table prefix of the postroom tables, when the store has one.
    fn table_prefix(&self) -> Option<String> {
        None
    }
    /// `consumer`'s inbox queue in this store's tables, for feeds that store deliveries into
    /// it (see [`crate::inbox_feed`]); `ordered`: rows carry their aggregate key and version
    /// for the workers' ordered mode.
    fn inbox_feed(&self, consumer: &str, ordered: bool) -> Result<Arc<dyn InboxFeed>> {
        let _ = (consumer, ordered);
        Err(Error::config(format!(
            "the {} store has no inbox queue (use postgres://)",
            self.driver()
        )))
    }
    /// The consumers' last errors kept in this store's tables, when it keeps them.
    fn last_errors(&self) -> Option<Arc<dyn LastErrorLog>> {
        None
    }
    /// The concrete store (`SqliteStore`, `PgStore`), for an application that writes its own
    /// tables in the same transactions.
    fn as_any(&self) -> &dyn Any;
}
