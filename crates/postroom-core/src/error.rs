//! The one error type of postroom's traits, with a kind that says transient or permanent.

use std::fmt;

/// Whether repeating the same action later can succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Worth retrying after a delay: a dependency is down, a lock, a timeout.
    Transient,
    /// Retrying cannot help: bad data, a broken contract, a constraint.
    Permanent,
    /// Not classified: a few bounded retries, then the parking lot.
    Unknown,
}

crate::stable_names!(ErrorClass, "error class" {
    Transient => "transient",
    Permanent => "permanent",
    Unknown => "unknown",
});

/// What went wrong, in portable terms. Stores and transports map their codes into these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The connection to a server was refused or lost.
    Connection,
    /// An operation did not finish in time.
    Timeout,
    /// The database is locked by another writer (SQLite busy).
    Busy,
    /// A deadlock was detected and this transaction was chosen as the victim.
    Deadlock,
    /// A serialization failure under SERIALIZABLE / REPEATABLE READ.
    SerializationFailure,
    /// A commit was sent but its outcome is unknown (the connection died).
    CommitOutcomeUnknown,
    /// The broker returned the message: no queue is bound for its route.
    Unroutable,
    /// The broker refused the message (negative confirm, reject-publish overflow).
    Nacked,
    /// The channel or subscription was closed under us.
    Closed,
    /// An integrity constraint was violated.
    ConstraintViolation,
    /// Data that cannot be stored or processed as it is.
    InvalidData,
    /// Bad configuration.
    Config,
    /// A file or socket error that is not a lost connection.
    Io,
    /// The thing asked for does not exist.
    NotFound,
    /// The backend does not support this operation.
    Unsupported,
}

impl ErrorKind {
    /// Transient or permanent. Every variant is listed: a new one forces a decision.
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            ErrorKind::Connection
            | ErrorKind::Timeout
            | ErrorKind::Busy
            | ErrorKind::Deadlock
            | ErrorKind::SerializationFailure
            | ErrorKind::CommitOutcomeUnknown
            | ErrorKind::Unroutable
            | ErrorKind::Nacked
            | ErrorKind::Closed
            | ErrorKind::Io => ErrorClass::Transient,
            ErrorKind::ConstraintViolation
            | ErrorKind::InvalidData
            | ErrorKind::Config
            | ErrorKind::NotFound
            | ErrorKind::Unsupported => ErrorClass::Permanent,
        }
    }

    /// Stable snake_case name, used in metrics labels and parking records.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::Connection => "connection",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Busy => "busy",
            ErrorKind::Deadlock => "deadlock",
            ErrorKind::SerializationFailure => "serialization_failure",
            ErrorKind::CommitOutcomeUnknown => "commit_outcome_unknown",
            ErrorKind::Unroutable => "unroutable",
            ErrorKind::Nacked => "nacked",
            ErrorKind::Closed => "closed",
            ErrorKind::ConstraintViolation => "constraint_violation",
            ErrorKind::InvalidData => "invalid_data",
            ErrorKind::Config => "config",
            ErrorKind::Io => "io",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Unsupported => "unsupported",
        }
    }
}

/// An error from a store or a transport.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A configuration error: bad settings, a bad URL, a bad file.
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    /// The same error, its kind and source kept, with `context: ` in front of its message.
    #[must_use]
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// The same error with its text passed through `scrub` (e.g. to remove a secret a server
    /// quoted back): the message, and the source's text where `scrub` changes it (that
    /// source is then kept as its scrubbed text). The kind is kept.
    #[must_use]
    pub fn scrubbed(mut self, scrub: impl Fn(&str) -> String) -> Self {
        self.message = scrub(&self.message);
        if let Some(source) = self.source.take() {
            let text = source.to_string();
            let clean = scrub(&text);
            self.source = Some(if clean == text {
                source
            } else {
                Box::new(ScrubbedSource(clean))
            });
        }
        self
    }

    /// Attach the underlying error.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The kind.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Transient or permanent.
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        self.kind.class()
    }

    /// True when repeating later can succeed.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        self.class() == ErrorClass::Transient
    }

    /// The message without the kind.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)?;
        if let Some(src) = &self.source {
            write!(f, ": {src}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// An underlying error whose text held a secret: its scrubbed text.
#[derive(Debug)]
struct ScrubbedSource(String);

impl fmt::Display for ScrubbedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScrubbedSource {}

/// Result with postroom's [`Error`].
pub type Result<T = (), E = Error> = std::result::Result<T, E>;
