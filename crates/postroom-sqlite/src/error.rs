//! SQLite and sqlx errors mapped into postroom's portable kinds.

use postroom_core::{Error, ErrorKind};

/// Map a sqlx error (SQLite driver) into a postroom [`Error`].
pub fn map(err: sqlx::Error) -> Error {
    let kind = kind_of(&err);
    let message = match &err {
        sqlx::Error::Database(db) => format!(
            "sqlite error {}: {}",
            db.code().unwrap_or_default(),
            db.message()
        ),
        other => other.to_string(),
    };
    Error::new(kind, message).with_source(err)
}

fn kind_of(err: &sqlx::Error) -> ErrorKind {
    match err {
        sqlx::Error::Database(db) => {
            // Extended result codes: the primary code is the low byte.
            let code: Option<i64> = db.code().and_then(|c| c.parse().ok());
            code.map_or(ErrorKind::Io, |c| kind_of_code(c & 0xff))
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => ErrorKind::Io,
        sqlx::Error::PoolTimedOut => ErrorKind::Timeout,
        // A migration that cannot be applied needs an operator: retrying will not help.
        sqlx::Error::Migrate(_) => ErrorKind::Config,
        other => postroom_core::sql_store::sqlx_error_kind(other),
    }
}

/// The kind of an SQLite error from its primary result code.
///
/// A code not listed here is retried (as an I/O fault), on SQLite as on PostgreSQL: the
/// retry budget bounds what that costs (a few redeliveries, then parking with the error
/// kept), while calling it permanent would park a good message at once for what may be a
/// passing fault of the engine (an interrupted statement, a schema changed underneath,
/// memory short for a moment).
fn kind_of_code(primary: i64) -> ErrorKind {
    match primary {
        5 | 6 => ErrorKind::Busy,               // SQLITE_BUSY, SQLITE_LOCKED
        19 => ErrorKind::ConstraintViolation,   // SQLITE_CONSTRAINT
        8 | 14 | 23 => ErrorKind::Config,       // READONLY, CANTOPEN, AUTH
        3 => ErrorKind::Config,                 // PERM: access permission denied
        1 => ErrorKind::Config, // SQLITE_ERROR: an SQL error or a missing table or column
        10 | 13 | 15 => ErrorKind::Io, // IOERR, FULL, PROTOCOL
        11 | 26 => ErrorKind::InvalidData, // CORRUPT, NOTADB
        18 | 20 | 25 => ErrorKind::InvalidData, // TOOBIG, MISMATCH, RANGE
        _ => ErrorKind::Io,
    }
}

/// Extension to map sqlx results.
pub(crate) trait SqlxResultExt<T> {
    fn db(self) -> postroom_core::Result<T>;
}

impl<T> SqlxResultExt<T> for Result<T, sqlx::Error> {
    fn db(self) -> postroom_core::Result<T> {
        self.map_err(map)
    }
}

#[cfg(test)]
mod tests {
    use super::kind_of_code;
    use postroom_core::{ErrorClass, ErrorKind};

    #[test]
    fn a_code_not_recognised_is_retried_as_on_postgresql() {
        // SQLITE_INTERNAL, SQLITE_NOMEM, SQLITE_INTERRUPT, SQLITE_SCHEMA, and one no version
        // defines.
        for code in [2, 7, 9, 17, 99] {
            assert_eq!(kind_of_code(code), ErrorKind::Io, "code {code}");
            assert_eq!(kind_of_code(code).class(), ErrorClass::Transient);
        }
        assert_eq!(kind_of_code(5), ErrorKind::Busy);
        assert_eq!(kind_of_code(11), ErrorKind::InvalidData);
        assert_eq!(kind_of_code(1), ErrorKind::Config);
    }

    /// The engine's own errors: a missing table is a mistake in the query or the schema (as
    /// PostgreSQL's `42P01` is), a duplicate key a constraint.
    #[tokio::test]
    async fn real_engine_errors_get_their_kinds() {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        let missing = sqlx::query("SELECT * FROM no_such_table")
            .execute(&pool)
            .await
            .unwrap_err();
        assert_eq!(super::map(missing).kind(), ErrorKind::Config);
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .execute(&pool)
            .await
            .unwrap();
        let twice = sqlx::query("INSERT INTO t VALUES (1), (1)")
            .execute(&pool)
            .await
            .unwrap_err();
        assert_eq!(super::map(twice).kind(), ErrorKind::ConstraintViolation);
    }
}
