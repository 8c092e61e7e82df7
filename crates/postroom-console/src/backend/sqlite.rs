//! The console over one SQLite file: its parking lot, and its embedded queue (or a broker) as
//! the transport redrives go to and backlogs are read from.

use super::store::{ConsoleStore, StoreBackend};
use chrono::{DateTime, Utc};
use postroom_core::{OutboxStore, Result, async_trait};
use postroom_sqlite::SqliteStore;
use std::sync::Arc;
use std::time::Duration;

/// The console's backend on SQLite.
pub type SqliteBackend = StoreBackend<SqliteStore>;

impl SqliteBackend {
    /// Over `store`, redriving into its embedded queue.
    #[must_use]
    pub fn new(store: SqliteStore) -> Self {
        let queue = store.queue();
        Self::with_transport(store, Arc::new(queue))
    }
}

#[async_trait]
impl ConsoleStore for SqliteStore {
    type Parking = SqliteStore;
    const QUEUE: &'static str = "sqlite";

    fn parking(&self) -> SqliteStore {
        self.clone()
    }

    async fn consumer_names(&self) -> Result<Vec<String>> {
        SqliteStore::consumer_names(self).await
    }

    async fn queue_stages(&self, consumer: &str) -> Result<Vec<(String, u64)>> {
        let depths = self.stage_depths(consumer).await?;
        Ok(depths
            .into_iter()
            .map(|(s, n)| (format!("stage {}", s + 1), n))
            .collect())
    }

    async fn relay_lag(&self) -> Result<Option<Duration>> {
        SqliteStore::relay_lag(self).await
    }

    async fn relay_pending(&self) -> Result<u64> {
        OutboxStore::pending(self).await
    }

    async fn scheduled_rows(&self) -> Result<(u64, Option<DateTime<Utc>>)> {
        SqliteStore::scheduled_rows(self).await
    }

    async fn activity_since(&self, consumer: &str, since: DateTime<Utc>) -> Result<(u64, u64)> {
        SqliteStore::activity_since(self, consumer, since).await
    }
}
