//! The console over PostgreSQL: its parking lot, and any transport as the place redrives go
//! and backlogs are read (the table queue, or a broker).

use super::{ConsumerFigures, ParkingConsole, PipelineProbe};
use chrono::{DateTime, Utc};
use postroom_core::{
    AuditEntry, MessageId, OutboxStore, ParkedMessage, ParkedSummary, ParkingQuery, ParkingStore,
    Publisher, Result, RunControl, Transport, async_trait,
};
use postroom_postgres::{PgParking, PgStore};
use std::sync::Arc;
use std::time::Duration;

/// The console's backend on PostgreSQL.
#[derive(Clone)]
pub struct PgBackend {
    store: PgStore,
    parking: PgParking,
    transport: Arc<dyn Transport>,
}

impl PgBackend {
    /// Over `store` (migrated), redriving through and reading backlogs from `transport`.
    #[must_use]
    pub fn new(store: PgStore, transport: Arc<dyn Transport>) -> Self {
        let parking = store.parking();
        Self {
            store,
            parking,
            transport,
        }
    }
}

#[async_trait]
impl ParkingConsole for PgBackend {
    fn store(&self) -> Arc<dyn ParkingStore> {
        Arc::new(self.parking.clone())
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
        self.parking.query_parked(q, offset, limit).await
    }

    async fn count(&self, q: &ParkingQuery) -> Result<u64> {
        self.parking.count_parked(q).await
    }

    async fn summaries(&self, q: &ParkingQuery, limit: usize) -> Result<Vec<ParkedSummary>> {
        self.parking.parked_summaries(q, limit).await
    }

    async fn archive(
        &self,
        items: &[(String, MessageId)],
        operator: &str,
        purge_after: DateTime<Utc>,
    ) -> Result<u64> {
        self.parking
            .archive_parked(items, operator, purge_after)
            .await
    }

    async fn purgeable(&self, now: DateTime<Utc>) -> Result<u64> {
        self.parking.purgeable(now).await
    }

    async fn purge_archived(&self, now: DateTime<Utc>) -> Result<u64> {
        self.parking.purge_archived(now).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<i64> {
        self.parking.append_audit(entry).await
    }

    async fn audit(&self, target: Option<&str>, limit: usize) -> Result<Vec<AuditEntry>> {
        self.parking.audit_entries(target, limit).await
    }

    async fn save_run_control(&self, control: &RunControl) -> Result<()> {
        self.parking.save_run_control(control).await
    }

    async fn run_control(&self, run_id: &str) -> Result<Option<RunControl>> {
        self.parking.run_control(run_id).await
    }
}

#[async_trait]
impl PipelineProbe for PgBackend {
    async fn consumers(&self) -> Result<Vec<String>> {
        self.store.consumer_names().await
    }

    async fn consumer(&self, consumer: &str) -> Result<ConsumerFigures> {
        let backlog = self.transport.backlog(consumer).await?;
        // Retry depths are known here for the table queue; a broker's stage queues are read
        // by its own transport (its backlog's `delayed`).
        let stages = if self.transport.name() == "postgres" {
            self.store
                .retry_depths(consumer)
                .await?
                .into_iter()
                .map(|(a, n)| (format!("retry {a}"), n))
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
        let pending = OutboxStore::pending(&self.store.outbox()).await?;
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
