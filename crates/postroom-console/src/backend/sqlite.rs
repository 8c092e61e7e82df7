//! The console over one SQLite file: its parking lot, and its embedded queue (or a broker) as
//! the transport redrives go to and backlogs are read from.

use super::{ConsumerFigures, ParkingConsole, PipelineProbe};
use chrono::{DateTime, Utc};
use postroom_core::{
    AuditEntry, MessageId, OutboxStore, ParkedMessage, ParkedSummary, ParkingQuery, ParkingStore,
    Publisher, Result, RunControl, Transport, async_trait,
};
use postroom_sqlite::SqliteStore;
use std::sync::Arc;
use std::time::Duration;

/// The console's backend on SQLite.
#[derive(Clone)]
pub struct SqliteBackend {
    store: SqliteStore,
    transport: Arc<dyn Transport>,
}

impl SqliteBackend {
    /// Over `store`, redriving into its embedded queue.
    #[must_use]
    pub fn new(store: SqliteStore) -> Self {
        let queue = store.queue();
        Self::with_transport(store, Arc::new(queue))
    }

    /// Over `store`, redriving through and reading backlogs from `transport` (a broker).
    #[must_use]
    pub fn with_transport(store: SqliteStore, transport: Arc<dyn Transport>) -> Self {
        Self { store, transport }
    }
}

#[async_trait]
impl ParkingConsole for SqliteBackend {
    fn store(&self) -> Arc<dyn ParkingStore> {
        Arc::new(self.store.clone())
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.transport.publisher()
    }

    async fn query(
        &self,
        q: &ParkingQuery,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ParkedMessage>> {
        self.store.query_parked(q, offset, limit).await
    }

    async fn count(&self, q: &ParkingQuery) -> Result<u64> {
        self.store.count_parked(q).await
    }

    async fn summaries(&self, q: &ParkingQuery, limit: usize) -> Result<Vec<ParkedSummary>> {
        self.store.parked_summaries(q, limit).await
    }

    async fn archive(
        &self,
        items: &[(String, MessageId)],
        operator: &str,
        purge_after: DateTime<Utc>,
    ) -> Result<u64> {
        self.store
            .archive_parked(items, operator, purge_after)
            .await
    }

    async fn purgeable(&self, now: DateTime<Utc>) -> Result<u64> {
        self.store.purgeable(now).await
    }

    async fn purge_archived(&self, now: DateTime<Utc>) -> Result<u64> {
        self.store.purge_archived(now).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<i64> {
        self.store.append_audit(entry).await
    }

    async fn audit(&self, target: Option<&str>, limit: usize) -> Result<Vec<AuditEntry>> {
        self.store.audit_entries(target, limit).await
    }

    async fn save_run_control(&self, control: &RunControl) -> Result<()> {
        self.store.save_run_control(control).await
    }

    async fn run_control(&self, run_id: &str) -> Result<Option<RunControl>> {
        self.store.run_control(run_id).await
    }
}

#[async_trait]
impl PipelineProbe for SqliteBackend {
    async fn consumers(&self) -> Result<Vec<String>> {
        self.store.consumer_names().await
    }

    async fn consumer(&self, consumer: &str) -> Result<ConsumerFigures> {
        let backlog = self.transport.backlog(consumer).await?;
        // Stage depths are known here for the embedded queue; a broker's stage queues are
        // read by its own transport (its backlog's `delayed`).
        let stages = if self.transport.name() == "sqlite" {
            self.store
                .stage_depths(consumer)
                .await?
                .into_iter()
                .map(|(s, n)| (format!("stage {}", s + 1), n))
                .collect()
        } else {
            Vec::new()
        };
        let since = Utc::now() - chrono::Duration::minutes(1);
        let (handled, parked) = self.store.activity_since(consumer, since).await?;
        Ok(ConsumerFigures {
            backlog,
            stages,
            handled_last_minute: handled,
            parked_last_minute: parked,
        })
    }

    async fn relay(&self) -> Result<(Option<Duration>, u64)> {
        let lag = self.store.relay_lag().await?;
        let pending = OutboxStore::pending(&self.store).await?;
        Ok((lag, pending))
    }

    async fn ready(&self) -> Result<()> {
        self.store.relay_lag().await?;
        // The broker answers when a backlog can be read.
        if let Some(first) = self.store.consumer_names().await?.first() {
            self.transport.backlog(first).await?;
        }
        Ok(())
    }
}
