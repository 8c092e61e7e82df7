//! The CLI's error: a kind that decides the exit code, and a message for people.

use std::fmt;
use std::process::ExitCode;

/// What kind of failure ended the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CliErrorKind {
    /// Bad flags, bad config file, bad values: exit 2.
    Usage,
    /// A server or file could not be reached or opened: exit 3.
    Unreachable,
    /// The command ran but an invariant failed (e.g. the demo lost a message): exit 1.
    InvariantFailed,
    /// The operation failed midway: exit 1.
    Failed,
}

/// A CLI failure.
#[derive(Debug)]
pub struct CliError {
    /// Kind.
    pub kind: CliErrorKind,
    /// Message.
    pub message: String,
}

impl CliError {
    /// A usage / configuration error.
    pub fn usage(m: impl Into<String>) -> Self {
        Self {
            kind: CliErrorKind::Usage,
            message: m.into(),
        }
    }
    /// A failed operation.
    pub fn failed(m: impl Into<String>) -> Self {
        Self {
            kind: CliErrorKind::Failed,
            message: m.into(),
        }
    }
    /// The exit code scripts see.
    #[must_use]
    pub fn exit_code(&self) -> ExitCode {
        match self.kind {
            CliErrorKind::InvariantFailed | CliErrorKind::Failed => ExitCode::from(1),
            CliErrorKind::Usage => ExitCode::from(2),
            CliErrorKind::Unreachable => ExitCode::from(3),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

impl From<postroom_core::Error> for CliError {
    fn from(e: postroom_core::Error) -> Self {
        use postroom_core::ErrorKind as K;
        let kind = match e.kind() {
            K::Config => CliErrorKind::Usage,
            K::Connection | K::Timeout | K::Io => CliErrorKind::Unreachable,
            K::Busy
            | K::Deadlock
            | K::SerializationFailure
            | K::CommitOutcomeUnknown
            | K::Unroutable
            | K::Nacked
            | K::Closed
            | K::ConstraintViolation
            | K::InvalidData
            | K::NotFound
            | K::Unsupported => CliErrorKind::Failed,
            _ => CliErrorKind::Failed,
        };
        Self {
            kind,
            message: e.to_string(),
        }
    }
}

impl From<sqlx::Error> for CliError {
    fn from(e: sqlx::Error) -> Self {
        postroom_sqlite::map_error(e).into()
    }
}

/// Result of a CLI command.
pub type CliResult<T = ()> = Result<T, CliError>;
