//! The embedded store: a SQLite file holding the outbox, the parking lot and a queue.

use crate::{SqliteQueue, SqliteStore};
use postroom_core::driver::{Driver, QueueOptions, Store, StoreDriver, StoreOptions, cannot_reach};
use postroom_core::driver::{Endpoint, SQLITE};
use postroom_core::{Error, Result};
use postroom_core::{InboxLookup, OutboxStore, ParkingStore, Transport, async_trait};
use std::any::Any;
use std::sync::Arc;

/// Opens SQLite files.
#[derive(Clone, Copy, Debug, Default)]
pub struct SqliteDriver;

impl Driver for SqliteDriver {
    fn name(&self) -> &'static str {
        SQLITE
    }

    fn schemes(&self) -> &'static [&'static str] {
        &[SQLITE]
    }

    fn url_help(&self) -> &'static str {
        "a SQLite file path (app.db, sqlite:app.db): the embedded store, no server"
    }
}

#[async_trait(?Send)]
impl StoreDriver for SqliteDriver {
    async fn open(&self, endpoint: &Endpoint, options: &StoreOptions) -> Result<Arc<dyn Store>> {
        let path = endpoint.file_path()?;
        if options.must_exist && !path.exists() {
            return Err(Error::config(format!(
                "database {} does not exist (pass --database or set POSTROOM_DATABASE)",
                path.display()
            )));
        }
        let store = SqliteStore::open(&path)
            .await
            .map_err(|e| cannot_reach("SQLite", endpoint, e))?;
        Ok(Arc::new(SqliteFile { store }))
    }
}

/// An open SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteFile {
    /// The store.
    pub store: SqliteStore,
}

impl Store for SqliteFile {
    fn driver(&self) -> &'static str {
        SQLITE
    }

    fn location(&self) -> String {
        self.store.path().display().to_string()
    }

    fn outbox(&self) -> Arc<dyn OutboxStore> {
        Arc::new(self.store.clone())
    }

    fn inbox(&self) -> Option<Arc<dyn InboxLookup>> {
        Some(Arc::new(self.store.clone()))
    }

    fn parking(&self) -> Arc<dyn ParkingStore> {
        Arc::new(self.store.clone())
    }

    fn queue(&self, options: &QueueOptions) -> Result<Arc<dyn Transport>> {
        let config = options.apply(SqliteQueue::defaults());
        Ok(Arc::new(self.store.queue_with(config)?))
    }

    fn last_errors(&self) -> Option<Arc<dyn postroom_core::parking::LastErrorLog>> {
        Some(Arc::new(self.store.last_errors()))
    }

    fn as_any(&self) -> &dyn Any {
        &self.store
    }
}
