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
            let code: i64 = db.code().and_then(|c| c.parse().ok()).unwrap_or(1);
            match code & 0xff {
                5 | 6 => ErrorKind::Busy,               // SQLITE_BUSY, SQLITE_LOCKED
                19 => ErrorKind::ConstraintViolation,   // SQLITE_CONSTRAINT
                8 | 14 | 23 => ErrorKind::Config,       // READONLY, CANTOPEN, AUTH
                10 | 13 | 15 => ErrorKind::Io,          // IOERR, FULL, PROTOCOL
                11 | 26 => ErrorKind::InvalidData,      // CORRUPT, NOTADB
                18 | 20 | 25 => ErrorKind::InvalidData, // TOOBIG, MISMATCH, RANGE
                _ => ErrorKind::InvalidData,
            }
        }
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) => ErrorKind::Io,
        sqlx::Error::PoolTimedOut => ErrorKind::Timeout,
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => ErrorKind::Closed,
        sqlx::Error::Configuration(_) => ErrorKind::Config,
        sqlx::Error::RowNotFound => ErrorKind::NotFound,
        sqlx::Error::Migrate(_) => ErrorKind::Config,
        _ => ErrorKind::InvalidData,
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
