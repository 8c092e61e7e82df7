//! The closed vocabulary of handler results (R7) and what the consumer does with them.

use crate::error::{Error, ErrorClass};
use std::time::Duration;

/// A successful handling. Every variant is acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handled {
    /// The effect was applied and committed.
    Applied,
    /// The inbox already held this message id: nothing new was committed.
    Duplicate,
    /// Not an error: a business result (e.g. `inventory.reservation_rejected`) that the
    /// handler published through its own outbox in the same transaction. The label is for
    /// metrics and reports.
    BusinessOutcome(String),
}

/// A failed handling, with its class.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{class} error: {message}")]
pub struct HandlerError {
    /// Transient, permanent or unknown.
    pub class: ErrorClass,
    /// A short machine-friendly code (e.g. `db_unavailable`, `version_gap`).
    pub code: String,
    /// Human text; truncated when stored.
    pub message: String,
}

impl HandlerError {
    /// A transient error: retry after the next ladder delay.
    pub fn transient(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Transient,
            code: code.into(),
            message: message.into(),
        }
    }
    /// A permanent error: park at once.
    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Permanent,
            code: code.into(),
            message: message.into(),
        }
    }
    /// An unclassified error: a few bounded retries, then park.
    pub fn unknown(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Unknown,
            code: code.into(),
            message: message.into(),
        }
    }
}

impl From<Error> for HandlerError {
    fn from(e: Error) -> Self {
        HandlerError {
            class: e.class(),
            code: e.kind().as_str().to_string(),
            message: e.to_string(),
        }
    }
}

/// What the consumer loop does with one delivery. Transports translate this to native acts.
#[derive(Clone, Debug, PartialEq)]
pub enum Disposition {
    /// Acknowledge: the effect is durable (or was a duplicate, or a business outcome).
    Ack,
    /// Publish a copy with the same id to the delay stage, then acknowledge the original.
    Retry(RetryPlan),
    /// Move to the parking lot with the reason.
    Park(ParkReason),
}

/// A scheduled retry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPlan {
    /// The attempt number the copy will carry in `x-retry-attempt` (1 for the first retry).
    pub attempt: u32,
    /// Index of the ladder stage (0-based).
    pub stage: usize,
    /// The stage's nominal delay (what the retry queue's TTL is on brokers with fixed stages).
    pub stage_delay: Duration,
    /// The delay with jitter added; never below `stage_delay`.
    pub delay: Duration,
    /// The error that caused it.
    pub error_class: ErrorClass,
    /// The error code.
    pub error_code: String,
    /// The error text.
    pub error_message: String,
}

/// Why a message is parked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkReason {
    /// Class of the last error.
    pub error_class: ErrorClass,
    /// Code of the last error (`malformed`, `unknown_schema_version`, `retry_budget_exhausted`, …).
    pub error_code: String,
    /// Text of the last error.
    pub error_message: String,
}
