//! The console over a store of its own (SQLite or PostgreSQL): the store's parking lot, and
//! any transport as the place redrives go and backlogs are read (the store's table queue, or
//! a broker). One body serves every store; what differs between them is [`ConsoleStore`].

use super::{ConsoleParking, ConsumerFigures, ParkingConsole, PipelineProbe, ScheduledFigures};
use chrono::{DateTime, Utc};
use postroom_core::{
    AuditLog, InboxLookup, ParkingArchive, ParkingStore, Publisher, Result, Transport, async_trait,
};
use std::sync::Arc;
use std::time::Duration;

/// What the console reads of a store beyond its parking lot. The store also answers
/// whether a consumer applied a message already (its inbox).
#[async_trait]
pub trait ConsoleStore: InboxLookup + Clone + Send + Sync + 'static {
    /// The store's parking lot.
    type Parking: ParkingStore + ParkingArchive + AuditLog + Clone + 'static;

    /// Name of the store's own table queue as a transport.
    const QUEUE: &'static str;

    /// The parking lot.
    fn parking(&self) -> Self::Parking;

    /// The consumers' inboxes in this store: the store itself.
    fn inbox(&self) -> Arc<dyn InboxLookup> {
        Arc::new(self.clone())
    }

    /// Consumers bound to the table queue or owning parked messages, by name.
    async fn consumer_names(&self) -> Result<Vec<String>>;

    /// Messages of `consumer` waiting in the table queue for a retry, by a label of the wait
    /// (waits with none are left out).
    async fn queue_stages(&self, consumer: &str) -> Result<Vec<(String, u64)>>;

    /// Age of the oldest unpublished outbox row, `None` when every row is published.
    async fn relay_lag(&self) -> Result<Option<Duration>>;

    /// Outbox rows waiting to be published.
    async fn relay_pending(&self) -> Result<u64>;

    /// Scheduled outbox rows not yet due, and when the first of them falls due.
    async fn scheduled_rows(&self) -> Result<(u64, Option<DateTime<Utc>>)>;

    /// Messages `consumer` handled and parked since `since`.
    async fn activity_since(&self, consumer: &str, since: DateTime<Utc>) -> Result<(u64, u64)>;
}

/// The console's backend on a store `S` ([`PgBackend`](super::PgBackend),
/// [`SqliteBackend`](super::SqliteBackend)).
#[derive(Clone)]
pub struct StoreBackend<S: ConsoleStore> {
    store: S,
    parking: S::Parking,
    transport: Arc<dyn Transport>,
}

impl<S: ConsoleStore> StoreBackend<S> {
    /// Over `store` (migrated), redriving through and reading backlogs from `transport`.
    #[must_use]
    pub fn with_transport(store: S, transport: Arc<dyn Transport>) -> Self {
        let parking = store.parking();
        Self {
            store,
            parking,
            transport,
        }
    }
}

impl<S: ConsoleStore> ParkingConsole for StoreBackend<S> {
    fn store(&self) -> Arc<dyn ParkingStore> {
        Arc::new(self.parking.clone())
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.transport.publisher()
    }

    fn lot(&self) -> &dyn ConsoleParking {
        &self.parking
    }

    fn inbox(&self) -> Option<Arc<dyn InboxLookup>> {
        Some(self.store.inbox())
    }
}

#[async_trait]
impl<S: ConsoleStore> PipelineProbe for StoreBackend<S> {
    async fn consumers(&self) -> Result<Vec<String>> {
        self.store.consumer_names().await
    }

    async fn consumer(&self, consumer: &str) -> Result<ConsumerFigures> {
        let backlog = self.transport.backlog(consumer).await?;
        // Retry depths are known here for the table queue; a broker's stage queues are read
        // by its own transport (its backlog's `delayed`).
        let stages = if self.transport.name() == S::QUEUE {
            self.store.queue_stages(consumer).await?
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
        let pending = self.store.relay_pending().await?;
        Ok((lag, pending))
    }

    async fn scheduled(&self) -> Result<ScheduledFigures> {
        let (waiting, next_due) = self.store.scheduled_rows().await?;
        Ok(ScheduledFigures { waiting, next_due })
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
