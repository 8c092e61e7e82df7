//! What the SQL stores (SQLite and PostgreSQL) share: how core values kept in their columns
//! are read back, and the kinds of the sqlx errors that mean the same on every engine. Each
//! store keeps its own SQL and its own column types; only the meaning lives here, once.

use crate::envelope::MessageId;
use crate::error::{Error, ErrorKind, Result};
use crate::parking::LastError;
use chrono::{DateTime, Utc};

/// The columns both stores select to read a [`ParkedSummary`](crate::parking::ParkedSummary).
pub const PARKED_SUMMARY_COLUMNS: &str =
    "consumer, message_id, message_type, error_class, error_code, error_message, parked_at, status";

impl LastError {
    /// The last error of `id` from its stored columns; `class` is the stored name of its
    /// [`ErrorClass`](crate::ErrorClass), and an unknown one is invalid data.
    pub fn from_stored(
        id: MessageId,
        first_failure_at: DateTime<Utc>,
        at: DateTime<Utc>,
        class: &str,
        code: String,
        message: String,
    ) -> Result<Self> {
        Ok(Self {
            first_failure_at,
            at,
            class: class.parse().map_err(|e: String| {
                Error::new(ErrorKind::InvalidData, format!("last error of {id}: {e}"))
            })?,
            code,
            message,
        })
    }
}

/// The kind of an sqlx error that means the same on every engine: a closed pool, a missing
/// row, a query that does not fit the schema ([`ErrorKind::Config`]), a value that does not
/// decode or encode ([`ErrorKind::InvalidData`]).
///
/// A store classes the errors whose meaning depends on its engine first (the server's own
/// errors, lost connections, pool time-outs). Anything else that reaches here (`sqlx::Error`
/// is `#[non_exhaustive]`) is retried a bounded number of times, as an I/O fault, until it is
/// given a kind.
#[cfg(feature = "sqlx")]
#[must_use]
pub fn sqlx_error_kind(err: &sqlx::Error) -> ErrorKind {
    match err {
        sqlx::Error::PoolClosed => ErrorKind::Closed,
        sqlx::Error::RowNotFound => ErrorKind::NotFound,
        sqlx::Error::Configuration(_)
        | sqlx::Error::InvalidArgument(_)
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::ColumnNotFound(_) => ErrorKind::Config,
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::Encode(_) => {
            ErrorKind::InvalidData
        }
        _ => ErrorKind::Io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parking::ParkedStatus;

    #[test]
    fn parked_status_reads_back_its_stored_name() {
        for s in [ParkedStatus::Parked, ParkedStatus::Redriven] {
            assert_eq!(s.as_str().parse::<ParkedStatus>(), Ok(s));
        }
        assert_eq!(
            "gone".parse::<ParkedStatus>(),
            Err(r#"unknown parked status "gone" (expected parked or redriven)"#.to_string())
        );
    }

    #[test]
    fn an_unknown_stored_class_is_invalid_data() {
        let now = Utc::now();
        let e = LastError::from_stored(MessageId::new(), now, now, "odd", "c".into(), "m".into())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData);
        let ok = LastError::from_stored(
            MessageId::new(),
            now,
            now,
            "transient",
            "c".into(),
            "m".into(),
        )
        .unwrap();
        assert_eq!(ok.class, crate::ErrorClass::Transient);
    }
}
