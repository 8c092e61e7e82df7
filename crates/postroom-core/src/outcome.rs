//! The closed vocabulary of handler results and what the consumer does with them.

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

/// Error codes postroom itself gives, stored with parked messages and used in metrics.
pub mod codes {
    /// An aggregate version arrived ahead of the one expected (the version guard).
    pub const VERSION_GAP: &str = "version_gap";
    /// A copy was delivered the crash-loop bound's number of times without being settled.
    pub const CRASH_LOOP: &str = "crash_loop";
    /// The handler panicked.
    pub const HANDLER_PANIC: &str = "handler_panic";
    /// The handler did not return within its timeout.
    pub const HANDLER_TIMEOUT: &str = "handler_timeout";
    /// The payload did not fit the type the handler expects.
    pub const MALFORMED_DATA: &str = "malformed_data";
}

impl HandlerError {
    /// Whether this error says a dependency is failing (what the circuit breaker counts):
    /// transient errors other than a version gap.
    #[must_use]
    pub fn is_dependency_failure(&self) -> bool {
        self.class == ErrorClass::Transient && self.code != codes::VERSION_GAP
    }

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

impl HandlerError {
    /// The same error with another class (override the class a conversion chose).
    #[must_use]
    pub fn with_class(mut self, class: ErrorClass) -> Self {
        self.class = class;
        self
    }

    /// The same error with another code.
    #[must_use]
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = code.into();
        self
    }
}

/// A payload that does not decode is permanent: retrying cannot change it.
impl From<serde_json::Error> for HandlerError {
    fn from(e: serde_json::Error) -> Self {
        HandlerError::permanent(codes::MALFORMED_DATA, e.to_string())
    }
}

/// Database errors by their portable kind (with the `sqlx` feature): constraint violations
/// and undecodable columns are permanent; deadlocks, serialization failures, a busy database,
/// lost connections and pool timeouts are transient; anything else is unknown (a few bounded
/// retries, then the parking lot). Override with [`HandlerError::with_class`].
#[cfg(feature = "sqlx")]
impl From<sqlx::Error> for HandlerError {
    fn from(e: sqlx::Error) -> Self {
        use sqlx::error::ErrorKind as K;
        let (class, code) = match &e {
            sqlx::Error::Database(db) => {
                let sqlstate = db.code().map(|c| c.to_string()).unwrap_or_default();
                match db.kind() {
                    K::UniqueViolation
                    | K::ForeignKeyViolation
                    | K::NotNullViolation
                    | K::CheckViolation => (ErrorClass::Permanent, "constraint_violation"),
                    _ if sqlstate == "40001" => (ErrorClass::Transient, "serialization_failure"),
                    _ if sqlstate == "40P01" => (ErrorClass::Transient, "deadlock"),
                    // SQLite busy / locked (primary codes 5 and 6).
                    _ if matches!(sqlstate.parse::<i64>().map(|c| c & 0xff), Ok(5 | 6)) => {
                        (ErrorClass::Transient, "busy")
                    }
                    _ if sqlstate.starts_with("08") || sqlstate.starts_with("57P") => {
                        (ErrorClass::Transient, "connection")
                    }
                    _ => (ErrorClass::Unknown, "database_error"),
                }
            }
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => (ErrorClass::Transient, "connection"),
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                (ErrorClass::Permanent, "invalid_data")
            }
            _ => (ErrorClass::Unknown, "database_error"),
        };
        HandlerError {
            class,
            code: code.into(),
            message: e.to_string(),
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
