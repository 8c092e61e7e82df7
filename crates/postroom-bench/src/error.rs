//! The harness's one error type.

/// What stopped a benchmark run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A server the scenario needs is not reachable (PostgreSQL, RabbitMQ, its management API).
    #[error("{server} is required at {url}: {message}")]
    Unavailable {
        /// Which server.
        server: &'static str,
        /// Where it was looked for (password redacted).
        url: String,
        /// The error.
        message: String,
    },
    /// A postroom call failed.
    #[error("{context}: {source}")]
    Postroom {
        /// What was being done.
        context: String,
        /// The error.
        source: postroom_core::Error,
    },
    /// A raw database call of a baseline or of the setup failed.
    #[error("{context}: {source}")]
    Sql {
        /// What was being done.
        context: String,
        /// The error.
        source: sqlx::Error,
    },
    /// A raw AMQP call of a baseline or of the setup failed.
    #[error("{context}: {source}")]
    Amqp {
        /// What was being done.
        context: String,
        /// The error.
        source: lapin::Error,
    },
    /// A scenario did not finish in its time limit (a stuck consumer, a lost message).
    #[error("{0}")]
    Stalled(String),
    /// Bad arguments.
    #[error("{0}")]
    Config(String),
    /// Writing the report or running a child process failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Attach context to the errors of postroom, sqlx and lapin calls.
pub trait Context<T> {
    /// Wrap the error with what was being done.
    fn ctx(self, context: impl Into<String>) -> Result<T, BenchError>;
}

impl<T> Context<T> for Result<T, postroom_core::Error> {
    fn ctx(self, context: impl Into<String>) -> Result<T, BenchError> {
        self.map_err(|source| BenchError::Postroom {
            context: context.into(),
            source,
        })
    }
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn ctx(self, context: impl Into<String>) -> Result<T, BenchError> {
        self.map_err(|source| BenchError::Sql {
            context: context.into(),
            source,
        })
    }
}

impl<T> Context<T> for Result<T, lapin::Error> {
    fn ctx(self, context: impl Into<String>) -> Result<T, BenchError> {
        self.map_err(|source| BenchError::Amqp {
            context: context.into(),
            source,
        })
    }
}

impl<T> Context<T> for Result<T, std::io::Error> {
    fn ctx(self, context: impl Into<String>) -> Result<T, BenchError> {
        self.map_err(|source| BenchError::Io {
            context: context.into(),
            source,
        })
    }
}
