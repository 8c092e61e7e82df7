//! What the console reads and changes, behind two small traits so that any store and
//! transport can stand behind it: [`ParkingConsole`] (the parking lot, its archive, redrive
//! runs and the audit) and [`PipelineProbe`] (consumers, backlogs, retry stages, relay lag,
//! recent activity, readiness). [`StoreBackend`] implements both over a store directly
//! ([`SqliteBackend`], [`PgBackend`]).

mod open;
mod postgres;
mod sqlite;
mod store;

pub use open::Backends;
pub use postgres::PgBackend;
pub use sqlite::SqliteBackend;
pub use store::{ConsoleStore, StoreBackend};

use chrono::{DateTime, Utc};
use postroom_core::{
    AuditEntry, Backlog, MessageId, ParkedMessage, ParkedSummary, ParkingQuery, ParkingStore,
    Publisher, Result, RunControl, async_trait,
};
use std::sync::Arc;
use std::time::Duration;

/// The parking lot as the console uses it.
#[async_trait]
pub trait ParkingConsole: Send + Sync + 'static {
    /// The parking store (redrive runs are recorded and executed through it).
    fn store(&self) -> Arc<dyn ParkingStore>;

    /// Where redriven messages are published (the transport their consumers read).
    fn publisher(&self) -> Arc<dyn Publisher>;

    /// Copies matching `q`, newest first, skipping `offset`, at most `limit`.
    async fn query(
        &self,
        q: &ParkingQuery,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ParkedMessage>>;

    /// How many copies match `q`.
    async fn count(&self, q: &ParkingQuery) -> Result<u64>;

    /// Summaries of the copies matching `q`, newest first, at most `limit`.
    async fn summaries(&self, q: &ParkingQuery, limit: usize) -> Result<Vec<ParkedSummary>>;

    /// Archive these copies until `purge_after`; returns how many were archived.
    async fn archive(
        &self,
        items: &[(String, MessageId)],
        operator: &str,
        purge_after: DateTime<Utc>,
    ) -> Result<u64>;

    /// Archived copies whose retention ended before `now`.
    async fn purgeable(&self, now: DateTime<Utc>) -> Result<u64>;

    /// Delete archived copies whose retention ended before `now`; returns how many.
    async fn purge_archived(&self, now: DateTime<Utc>) -> Result<u64>;

    /// Append to the audit.
    async fn append_audit(&self, entry: &AuditEntry) -> Result<i64>;

    /// Audit entries, newest first; only about `target` when given.
    async fn audit(&self, target: Option<&str>, limit: usize) -> Result<Vec<AuditEntry>>;

    /// Store the control of a run.
    async fn save_run_control(&self, control: &RunControl) -> Result<()>;

    /// The control of a run.
    async fn run_control(&self, run_id: &str) -> Result<Option<RunControl>>;
}

/// Figures of one consumer right now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsumerFigures {
    /// Ready, unacked, delayed and the oldest ready message's age.
    pub backlog: Backlog,
    /// Messages waiting in each retry stage, by stage label.
    pub stages: Vec<(String, u64)>,
    /// Messages handled in the last minute.
    pub handled_last_minute: u64,
    /// Messages parked in the last minute.
    pub parked_last_minute: u64,
}

/// The pipeline as the console watches it.
#[async_trait]
pub trait PipelineProbe: Send + Sync + 'static {
    /// Consumer names.
    async fn consumers(&self) -> Result<Vec<String>>;

    /// Figures of `consumer`.
    async fn consumer(&self, consumer: &str) -> Result<ConsumerFigures>;

    /// Age of the oldest unpublished outbox row (`None`: nothing waits), and how many wait.
    async fn relay(&self) -> Result<(Option<Duration>, u64)>;

    /// Ready when the stores and the broker answer.
    async fn ready(&self) -> Result<()>;
}
