//! `sqlx::Error` mapped into postroom's portable [`ErrorKind`]s, by SQLSTATE for server
//! errors, so that the retry policy can tell transient from permanent.

use postroom_core::{Error, ErrorKind};

/// The kind of a server error from its SQLSTATE code.
#[must_use]
pub fn kind_of_sqlstate(code: &str) -> ErrorKind {
    match code {
        "40001" => ErrorKind::SerializationFailure,
        "40P01" => ErrorKind::Deadlock,
        // admin_shutdown, crash_shutdown, cannot_connect_now
        "57P01" | "57P02" | "57P03" => ErrorKind::Connection,
        // query_canceled (statement_timeout) and lock_not_available (lock_timeout / NOWAIT)
        "57014" => ErrorKind::Timeout,
        "55P03" => ErrorKind::Busy,
        // feature_not_supported
        "0A000" => ErrorKind::Unsupported,
        c if c.starts_with("08") => ErrorKind::Connection,
        c if c.starts_with("23") => ErrorKind::ConstraintViolation,
        c if c.starts_with("22") => ErrorKind::InvalidData,
        // insufficient resources (too many connections, disk full, out of memory)
        c if c.starts_with("53") => ErrorKind::Connection,
        // syntax errors, undefined tables or columns: the schema or the query is wrong
        c if c.starts_with("42") => ErrorKind::Config,
        // Anything else (internal errors, transaction state) is retried a bounded number of
        // times like an I/O fault, as on SQLite: the retry budget bounds what that costs,
        // while calling it permanent would park a good message at once for what may be a
        // passing fault. Core has no "unknown database error" kind.
        _ => ErrorKind::Io,
    }
}

/// The kind of any `sqlx::Error`.
#[must_use]
pub fn kind_of(err: &sqlx::Error) -> ErrorKind {
    match err {
        sqlx::Error::Database(db) => db.code().map_or(ErrorKind::Io, |c| kind_of_sqlstate(&c)),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed => ErrorKind::Connection,
        other => postroom_core::sql_store::sqlx_error_kind(other),
    }
}

/// Map `err` into postroom's error, keeping it as the source.
#[must_use]
pub fn map(err: sqlx::Error) -> Error {
    let kind = kind_of(&err);
    let message = match &err {
        sqlx::Error::Database(db) => {
            format!("postgres error {}", db.code().as_deref().unwrap_or("?"))
        }
        _ => "postgres".to_string(),
    };
    Error::new(kind, message).with_source(err)
}

/// Map an error returned by COMMIT: a lost connection means the outcome is unknown (the
/// server may have committed), so it becomes [`ErrorKind::CommitOutcomeUnknown`]; any other
/// server error (e.g. a serialization failure at commit) means the transaction did not commit.
#[must_use]
pub fn map_commit(err: sqlx::Error) -> Error {
    // A lost connection (I/O error, or the server's own 57P0x / 08xxx as it closes the
    // session) leaves the outcome unknown; any other server error means it did not commit.
    if kind_of(&err) == ErrorKind::Connection {
        Error::new(
            ErrorKind::CommitOutcomeUnknown,
            "connection lost during COMMIT",
        )
        .with_source(err)
    } else {
        map(err)
    }
}

/// Commit `tx`, mapping a lost connection to [`ErrorKind::CommitOutcomeUnknown`].
pub async fn commit(tx: sqlx::Transaction<'_, sqlx::Postgres>) -> postroom_core::Result<()> {
    tx.commit().await.map_err(map_commit)
}

/// `.pg()` on sqlx results.
pub(crate) trait SqlxResultExt<T> {
    /// Map the error with [`map`].
    fn pg(self) -> postroom_core::Result<T>;
}

impl<T> SqlxResultExt<T> for Result<T, sqlx::Error> {
    fn pg(self) -> postroom_core::Result<T> {
        self.map_err(map)
    }
}

/// A URL parse error described without the URL (it may hold a password).
#[must_use]
pub fn describe_url_error(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Configuration(inner) => {
            let text = inner.to_string();
            // sqlx's messages name the part that is wrong, not the URL; keep them short.
            text.chars().take(200).collect()
        }
        _ => "unreadable connection URL".into(),
    }
}

/// Run `sql`, a `DELETE` whose `$1` is an age in seconds (rows older than it go), on `pool`;
/// returns how many rows went.
pub(crate) async fn delete_older_than(
    pool: &sqlx::PgPool,
    sql: &str,
    age: std::time::Duration,
) -> postroom_core::Result<u64> {
    let done = sqlx::query(sql)
        .bind(age.as_secs_f64())
        .execute(pool)
        .await
        .pg()?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates() {
        assert_eq!(kind_of_sqlstate("40001"), ErrorKind::SerializationFailure);
        assert_eq!(kind_of_sqlstate("40P01"), ErrorKind::Deadlock);
        for c in ["57P01", "57P02", "57P03", "08006", "08001", "53300"] {
            assert_eq!(kind_of_sqlstate(c), ErrorKind::Connection, "{c}");
        }
        assert_eq!(kind_of_sqlstate("23505"), ErrorKind::ConstraintViolation);
        assert_eq!(kind_of_sqlstate("23503"), ErrorKind::ConstraintViolation);
        assert_eq!(kind_of_sqlstate("22P02"), ErrorKind::InvalidData);
        assert_eq!(kind_of_sqlstate("42P01"), ErrorKind::Config);
    }

    #[test]
    fn client_side_errors() {
        assert_eq!(kind_of(&sqlx::Error::PoolTimedOut), ErrorKind::Connection);
        assert_eq!(kind_of(&sqlx::Error::PoolClosed), ErrorKind::Closed);
        let io = sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
        assert_eq!(map_commit(io).kind(), ErrorKind::CommitOutcomeUnknown);
    }
}
