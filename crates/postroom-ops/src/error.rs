//! The operations' error: a kind that a shell turns into an exit code (the CLI) or an HTTP
//! status (the console), and a message for people that never holds a password.

use std::fmt;

/// What kind of failure ended an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpsErrorKind {
    /// Bad flags, a bad config or topology file, bad values.
    Usage,
    /// A server or file could not be reached or opened.
    Unreachable,
    /// The operation ran but an invariant did not hold (the demo lost a message).
    InvariantFailed,
    /// The operation failed midway.
    Failed,
    /// The reader of the output went away (a closed pipe): it has what it wanted, so this
    /// ends a command quietly rather than failing it.
    OutputClosed,
}

/// An operation's failure.
#[derive(Debug)]
pub struct OpsError {
    /// Kind.
    pub kind: OpsErrorKind,
    /// Message (secrets already removed).
    pub message: String,
}

impl OpsError {
    /// An error of `kind`.
    pub fn new(kind: OpsErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A usage or configuration error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(OpsErrorKind::Usage, message)
    }

    /// A failed operation.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(OpsErrorKind::Failed, message)
    }

    /// A server or file that could not be reached.
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self::new(OpsErrorKind::Unreachable, message)
    }

    /// An invariant that did not hold.
    pub fn invariant(message: impl Into<String>) -> Self {
        Self::new(OpsErrorKind::InvariantFailed, message)
    }

    /// The same error with `context: ` in front of its message.
    #[must_use]
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for OpsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpsError {}

impl From<postroom_core::Error> for OpsError {
    fn from(e: postroom_core::Error) -> Self {
        use postroom_core::ErrorKind as K;
        let kind = match e.kind() {
            K::Config => OpsErrorKind::Usage,
            K::Connection | K::Timeout | K::Io => OpsErrorKind::Unreachable,
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
            | K::Unsupported => OpsErrorKind::Failed,
            // The core kind is non-exhaustive: a kind added later fails the operation.
            _ => OpsErrorKind::Failed,
        };
        let text = e.to_string();
        // A configuration mistake is named by its own words ("twice.toml: consumer \"a\" is
        // listed twice"); the kind's name in front of them says nothing more.
        let text = match e.kind() {
            K::Config => text
                .strip_prefix(&format!("{}: ", K::Config.as_str()))
                .map_or_else(|| text.clone(), str::to_string),
            _ => text,
        };
        Self::new(kind, text)
    }
}

/// The text of the file at `path`; `what` names it in the error (`config`, `topology`).
pub fn read_text(path: &std::path::Path, what: &str) -> OpsResult<String> {
    Ok(postroom_core::driver::workload::read_text(path, what)?)
}

/// Result of an operation.
pub type OpsResult<T = ()> = Result<T, OpsError>;
