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
///
/// Decisions are made on [`Code`](codes::Code), never by comparing text: the strings are how a code is
/// stored and shown.
pub mod codes {
    /// An aggregate version arrived ahead of the one expected (the version guard).
    pub const VERSION_GAP: &str = Code::VersionGap.as_str();
    /// A copy was delivered the crash-loop bound's number of times without being settled.
    pub const CRASH_LOOP: &str = Code::CrashLoop.as_str();
    /// The handler panicked.
    pub const HANDLER_PANIC: &str = Code::HandlerPanic.as_str();
    /// The handler did not return within its timeout.
    pub const HANDLER_TIMEOUT: &str = Code::HandlerTimeout.as_str();
    /// The payload did not fit the type the handler expects.
    pub const MALFORMED_DATA: &str = Code::MalformedData.as_str();

    /// One of the codes postroom gives.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Code {
        /// An aggregate version arrived ahead of the one expected: says nothing about a
        /// dependency.
        VersionGap,
        /// A copy was delivered the crash-loop bound's number of times without being settled.
        CrashLoop,
        /// The handler panicked.
        HandlerPanic,
        /// The handler did not return within its timeout.
        HandlerTimeout,
        /// The payload did not fit the type the handler expects.
        MalformedData,
    }

    impl Code {
        /// Every code, for lookups.
        pub const ALL: [Code; 5] = [
            Code::VersionGap,
            Code::CrashLoop,
            Code::HandlerPanic,
            Code::HandlerTimeout,
            Code::MalformedData,
        ];

        /// How the code is stored and shown.
        #[must_use]
        pub const fn as_str(self) -> &'static str {
            match self {
                Code::VersionGap => "version_gap",
                Code::CrashLoop => "crash_loop",
                Code::HandlerPanic => "handler_panic",
                Code::HandlerTimeout => "handler_timeout",
                Code::MalformedData => "malformed_data",
            }
        }

        /// The code stored as `text`, when it is one of postroom's.
        #[must_use]
        pub fn of(text: &str) -> Option<Code> {
            Code::ALL.into_iter().find(|c| c.as_str() == text)
        }
    }

    impl std::fmt::Display for Code {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.as_str())
        }
    }
}

impl HandlerError {
    /// Whether this error says a dependency is failing (what the circuit breaker counts):
    /// transient errors other than a version gap.
    #[must_use]
    pub fn is_dependency_failure(&self) -> bool {
        self.class == ErrorClass::Transient && self.postroom_code() != Some(codes::Code::VersionGap)
    }

    /// The code as one of postroom's, when it is one.
    #[must_use]
    pub fn postroom_code(&self) -> Option<codes::Code> {
        codes::Code::of(&self.code)
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

impl ParkReason {
    /// The code as one of postroom's, when it is one.
    #[must_use]
    pub fn postroom_code(&self) -> Option<codes::Code> {
        codes::Code::of(&self.error_code)
    }
}
