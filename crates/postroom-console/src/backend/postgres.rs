//! The console over PostgreSQL: its parking lot, and any transport as the place redrives go
//! and backlogs are read (the table queue, or a broker).

use super::store::{ConsoleStore, StoreBackend};
use chrono::{DateTime, Utc};
use postroom_core::{OutboxStore, Result, Transport, async_trait};
use postroom_postgres::{PgParking, PgStore};
use std::sync::Arc;
use std::time::Duration;

/// The console's backend on PostgreSQL.
pub type PgBackend = StoreBackend<PgStore>;

impl PgBackend {
    /// Over `store` (migrated), redriving through and reading backlogs from `transport`.
    #[must_use]
    pub fn new(store: PgStore, transport: Arc<dyn Transport>) -> Self {
        Self::with_transport(store, transport)
    }
}

#[async_trait]
impl ConsoleStore for PgStore {
    type Parking = PgParking;
    const QUEUE: &'static str = "postgres";

    fn parking(&self) -> PgParking {
        PgStore::parking(self)
    }

    async fn consumer_names(&self) -> Result<Vec<String>> {
        PgStore::consumer_names(self).await
    }

    async fn queue_stages(&self, consumer: &str) -> Result<Vec<(String, u64)>> {
        let depths = self.retry_depths(consumer).await?;
        Ok(depths
            .into_iter()
            .map(|(a, n)| (format!("retry {a}"), n))
            .collect())
    }

    async fn relay_lag(&self) -> Result<Option<Duration>> {
        PgStore::relay_lag(self).await
    }

    async fn relay_pending(&self) -> Result<u64> {
        OutboxStore::pending(&self.outbox()).await
    }

    async fn scheduled_rows(&self) -> Result<(u64, Option<DateTime<Utc>>)> {
        PgStore::scheduled_rows(self).await
    }

    async fn activity_since(&self, consumer: &str, since: DateTime<Utc>) -> Result<(u64, u64)> {
        PgStore::activity_since(self, consumer, since).await
    }
}
