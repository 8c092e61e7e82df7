//! The parking lot and its redrive bookkeeping: what is kept with each parked message (id,
//! type, schema version, attempts, first failure, last error, correlation and trace ids,
//! original route, producer, consumer and its version), how operators select them, the store
//! trait every backend implements, the header codec and ingest loop that bring copies from a
//! transport's dead-letter place into the store, and redrive.

pub mod codec;
pub mod console;
pub mod ingest;
pub mod records;
pub mod redrive;

pub use console::{AuditLog, ParkingArchive};
pub use ingest::ParkingIngest;
pub use records::{AuditEntry, ParkedSummary, ParkingQuery, RunControl, RunState};
pub mod last_error;

pub use last_error::{LastError, LastErrorLog, MemoryLastErrors};
pub use redrive::{RedriveProgress, RedriveReport, RedriveSkip, Redriver, SkippedMessage};

use crate::envelope::MessageId;
use crate::error::{ErrorClass, Result};
use crate::message::Headers;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Longest error text kept with a parked message.
pub const MAX_ERROR_CHARS: usize = 2000;

/// State of a parked message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkedStatus {
    /// Waiting for an operator.
    Parked,
    /// Sent back to its consumer by a redrive.
    Redriven,
}

crate::stable_names!(ParkedStatus, "parked status" {
    Parked => "parked",
    Redriven => "redriven",
});

/// A parked message with every diagnostic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParkedMessage {
    /// Stable id.
    pub message_id: MessageId,
    /// The consumer that parked it.
    pub consumer: String,
    /// That consumer's version.
    pub consumer_version: String,
    /// Message type, when known (a corrupt body may have none).
    pub message_type: Option<String>,
    /// Schema version, when known.
    pub schema_version: Option<u32>,
    /// Deliveries made (first delivery + retries).
    pub attempts: u32,
    /// When the first failure happened.
    pub first_failure_at: DateTime<Utc>,
    /// When it was parked.
    pub parked_at: DateTime<Utc>,
    /// Class of the last error.
    pub error_class: ErrorClass,
    /// Code of the last error.
    pub error_code: String,
    /// Text of the last error, truncated to [`MAX_ERROR_CHARS`].
    pub error_message: String,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// W3C traceparent.
    pub traceparent: Option<String>,
    /// The routing key / topic it was first published with.
    pub routing_key: String,
    /// The producing service.
    pub producer: Option<String>,
    /// Headers as received.
    pub headers: Headers,
    /// The body as received (may hold personal data: redacted by default in listings).
    pub body: Vec<u8>,
    /// Parked or redriven.
    pub status: ParkedStatus,
    /// How many times it has been redriven.
    pub redrive_count: u32,
}

/// A selection of parked messages. Empty fields match everything.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ParkingFilter {
    /// Only this message type.
    pub message_type: Option<String>,
    /// Only this error class.
    pub error_class: Option<ErrorClass>,
    /// Only this error code.
    pub error_code: Option<String>,
    /// Only this consumer.
    pub consumer: Option<String>,
    /// Parked at or after.
    pub since: Option<DateTime<Utc>>,
    /// Parked before.
    pub until: Option<DateTime<Utc>>,
    /// Only these ids.
    pub ids: Vec<MessageId>,
    /// Include messages already redriven (listing only; redrive never selects them).
    pub include_redriven: bool,
}

impl ParkingFilter {
    /// Whether `m` matches (the reference semantics every store's SQL must equal).
    #[must_use]
    pub fn matches(&self, m: &ParkedMessage) -> bool {
        (self.include_redriven || m.status == ParkedStatus::Parked)
            && self
                .message_type
                .as_ref()
                .is_none_or(|t| m.message_type.as_ref() == Some(t))
            && self.error_class.is_none_or(|c| m.error_class == c)
            && self.error_code.as_ref().is_none_or(|c| &m.error_code == c)
            && self.consumer.as_ref().is_none_or(|c| &m.consumer == c)
            && self.since.is_none_or(|t| m.parked_at >= t)
            && self.until.is_none_or(|t| m.parked_at < t)
            && (self.ids.is_empty() || self.ids.contains(&m.message_id))
    }

    /// This filter as a redrive applies it: messages already redriven are never selected.
    #[must_use]
    pub fn for_redrive(&self) -> ParkingFilter {
        ParkingFilter {
            include_redriven: false,
            ..self.clone()
        }
    }
}

/// A recorded redrive: which messages an operator chose, and how far it got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RedriveRun {
    /// Run id.
    pub id: String,
    /// When the selection was made.
    pub created_at: DateTime<Utc>,
    /// Who asked (operator name from the environment).
    pub operator: String,
    /// The filter, as JSON, for the audit.
    pub filter: String,
    /// Messages selected.
    pub total: u64,
    /// Messages already sent back.
    pub done: u64,
}

/// Storage of parked messages and redrive runs.
#[async_trait]
pub trait ParkingStore: Send + Sync {
    /// Store a parked message. Parking the same `(consumer, message_id)` again replaces the
    /// diagnostics and sets the status back to parked.
    async fn park(&self, message: &ParkedMessage) -> Result<()>;

    /// Messages matching `filter`, oldest first, at most `limit`.
    async fn search(&self, filter: &ParkingFilter, limit: usize) -> Result<Vec<ParkedMessage>>;

    /// How many match `filter`.
    async fn count(&self, filter: &ParkingFilter) -> Result<u64>;

    /// Every parked record with this id (one per consumer that parked it).
    async fn get(&self, id: MessageId) -> Result<Vec<ParkedMessage>>;

    /// Record a redrive run selecting at most `limit` parked messages matching `filter`.
    async fn create_redrive_run(
        &self,
        filter: &ParkingFilter,
        limit: usize,
        operator: &str,
    ) -> Result<RedriveRun>;

    /// A run by id.
    async fn redrive_run(&self, run_id: &str) -> Result<Option<RedriveRun>>;

    /// Recorded runs, newest first.
    async fn redrive_runs(&self, limit: usize) -> Result<Vec<RedriveRun>>;

    /// Up to `limit` messages of the run not yet sent back.
    async fn redrive_pending(&self, run_id: &str, limit: usize) -> Result<Vec<ParkedMessage>>;

    /// Record that `sent` (as read by [`redrive_pending`](Self::redrive_pending)) of the run
    /// was sent back: the run's item is done, and the parked record becomes `redriven` only
    /// if it is still the record that was read (same `parked_at` and `redrive_count`, still
    /// parked). When the redriven copy was consumed and parked again in between, the new
    /// parking stays visible and selectable; the answer is then `false`.
    async fn mark_redriven(&self, run_id: &str, sent: &ParkedMessage) -> Result<bool>;

    /// Record that `skipped` (as read by [`redrive_pending`](Self::redrive_pending)) of the
    /// run was not sent back, and why (`reason`: [`RedriveSkip::as_str`]): the run's item is
    /// done with that outcome, the parked record stays as it is.
    async fn mark_redrive_skipped(
        &self,
        run_id: &str,
        skipped: &ParkedMessage,
        reason: &str,
    ) -> Result<()>;

    /// Delete parked messages parked before `before` (retention). Returns how many.
    async fn purge(&self, before: DateTime<Utc>) -> Result<u64>;
}
