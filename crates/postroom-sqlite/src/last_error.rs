//! The consumers' last errors in the SQLite file ([`LastErrorLog`]): a record survives the
//! consumer process that wrote it, so a copy a broker dead-lettered by itself and ingested by
//! another process (or after a restart) is still joined with its last error.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{from_ms, ms, now_ms};
use postroom_core::parking::{LastError, LastErrorLog};
use postroom_core::{MessageId, Result, async_trait};
use sqlx::Row;
use std::time::Duration;

/// The last-error log in a SQLite file (from [`SqliteStore::last_errors`]).
#[derive(Clone, Debug)]
pub struct SqliteLastErrors {
    store: SqliteStore,
}

impl SqliteStore {
    /// The consumers' last errors in this file.
    #[must_use]
    pub fn last_errors(&self) -> SqliteLastErrors {
        SqliteLastErrors {
            store: self.clone(),
        }
    }
}

#[async_trait]
impl LastErrorLog for SqliteLastErrors {
    async fn record(&self, consumer: &str, id: MessageId, error: LastError) -> Result<()> {
        sqlx::query(
            "INSERT INTO postroom_last_errors (consumer, message_id, first_failure_at, at, class, code, message)
             VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (consumer, message_id) DO UPDATE SET
                 first_failure_at = MIN(first_failure_at, excluded.first_failure_at),
                 at = excluded.at, class = excluded.class, code = excluded.code,
                 message = excluded.message",
        )
        .bind(consumer)
        .bind(id.to_string())
        .bind(error.first_failure_at.timestamp_millis())
        .bind(error.at.timestamp_millis())
        .bind(error.class.as_str())
        .bind(&error.code)
        .bind(&error.message)
        .execute(self.store.pool())
        .await
        .db()?;
        Ok(())
    }

    async fn get(&self, consumer: &str, id: MessageId) -> Result<Option<LastError>> {
        let row = sqlx::query(
            "SELECT first_failure_at, at, class, code, message FROM postroom_last_errors
             WHERE consumer = ? AND message_id = ?",
        )
        .bind(consumer)
        .bind(id.to_string())
        .fetch_optional(self.store.pool())
        .await
        .db()?;
        let Some(row) = row else { return Ok(None) };
        LastError::from_stored(
            id,
            from_ms(row.get("first_failure_at")),
            from_ms(row.get("at")),
            row.get("class"),
            row.get("code"),
            row.get("message"),
        )
        .map(Some)
    }

    async fn forget(&self, consumer: &str, id: MessageId) -> Result<()> {
        sqlx::query("DELETE FROM postroom_last_errors WHERE consumer = ? AND message_id = ?")
            .bind(consumer)
            .bind(id.to_string())
            .execute(self.store.pool())
            .await
            .db()?;
        Ok(())
    }
}

impl SqliteLastErrors {
    /// Delete records not updated for `older_than` (messages that were never
    /// settled, e.g. expired by the broker's retention); returns how many went. Choose more
    /// than the broker's retention of its dead-letter queues.
    pub async fn purge(&self, older_than: Duration) -> Result<u64> {
        let done = sqlx::query("DELETE FROM postroom_last_errors WHERE at < ?")
            .bind(now_ms().saturating_sub(ms(older_than)))
            .execute(self.store.pool())
            .await
            .db()?;
        Ok(done.rows_affected())
    }
}
