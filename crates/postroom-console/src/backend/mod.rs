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
    AuditLog, Backlog, InboxLookup, ParkingArchive, ParkingStore, Publisher, Result, async_trait,
};
use std::sync::Arc;
use std::time::Duration;

/// A parking lot with what a console needs beyond [`ParkingStore`]: listings, the archive
/// and the audit (every store's parking lot is one).
pub trait ConsoleParking: ParkingStore + ParkingArchive + AuditLog + 'static {}

impl<T: ParkingStore + ParkingArchive + AuditLog + 'static> ConsoleParking for T {}

/// The parking lot as the console uses it, and where redriven messages go.
pub trait ParkingConsole: Send + Sync + 'static {
    /// The parking store (redrive runs are recorded and executed through it).
    fn store(&self) -> Arc<dyn ParkingStore>;

    /// Where redriven messages are published (the transport their consumers read).
    fn publisher(&self) -> Arc<dyn Publisher>;

    /// The parking lot's listings, archive, audit and redrive-run controls.
    fn lot(&self) -> &dyn ConsoleParking;

    /// The consumers' inboxes, when the console can read them: a redrive skips a message its
    /// consumer already applied (`None`: none is skipped for that reason).
    fn inbox(&self) -> Option<Arc<dyn InboxLookup>> {
        None
    }
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

/// The outbox's scheduled rows that are not yet due.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduledFigures {
    /// How many.
    pub waiting: u64,
    /// When the first of them falls due.
    pub next_due: Option<DateTime<Utc>>,
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

    /// The scheduled outbox rows not yet due.
    async fn scheduled(&self) -> Result<ScheduledFigures>;

    /// Ready when the stores and the broker answer.
    async fn ready(&self) -> Result<()>;
}
