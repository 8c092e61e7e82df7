//! The consumers' last errors in PostgreSQL ([`LastErrorLog`], table `{prefix}last_errors`):
//! shared by every consumer process and kept across restarts, so a copy a broker dead-lettered
//! by itself and ingested by another process is still joined with its last error.

use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::parking::{LastError, LastErrorLog};
use postroom_core::{MessageId, Result, async_trait};
use sqlx::{PgPool, Row};
use std::time::Duration;

/// The last-error log in `pool` under `prefix` (migrated beforehand).
#[derive(Clone, Debug)]
pub struct PgLastErrors {
    pool: PgPool,
    prefix: TablePrefix,
}

impl PgLastErrors {
    /// The log in `pool` under `prefix`.
    #[must_use]
    pub fn new(pool: PgPool, prefix: TablePrefix) -> Self {
        Self { pool, prefix }
    }

    /// Delete records not updated for `older_than` (messages never settled, e.g. expired by
    /// the broker's retention); returns how many went. Choose more than the broker's
    /// retention of its dead-letter queues.
    pub async fn purge(&self, older_than: Duration) -> Result<u64> {
        let sql = format!(
            "DELETE FROM {p}last_errors WHERE at < now() - make_interval(secs => $1)",
            p = self.prefix
        );
        crate::error::delete_older_than(&self.pool, &sql, older_than).await
    }
}

#[async_trait]
impl LastErrorLog for PgLastErrors {
    async fn record(&self, consumer: &str, id: MessageId, error: LastError) -> Result<()> {
        let sql = format!(
            "INSERT INTO {p}last_errors AS l (consumer, message_id, first_failure_at, at, class, code, message)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (consumer, message_id) DO UPDATE SET
                 first_failure_at = LEAST(l.first_failure_at, excluded.first_failure_at),
                 at = excluded.at, class = excluded.class, code = excluded.code,
                 message = excluded.message",
            p = self.prefix
        );
        sqlx::query(&sql)
            .bind(consumer)
            .bind(id.as_uuid())
            .bind(error.first_failure_at)
            .bind(error.at)
            .bind(error.class.as_str())
            .bind(&error.code)
            .bind(&error.message)
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(())
    }

    async fn get(&self, consumer: &str, id: MessageId) -> Result<Option<LastError>> {
        let sql = format!(
            "SELECT first_failure_at, at, class, code, message FROM {p}last_errors
             WHERE consumer = $1 AND message_id = $2",
            p = self.prefix
        );
        let row = sqlx::query(&sql)
            .bind(consumer)
            .bind(id.as_uuid())
            .fetch_optional(&self.pool)
            .await
            .pg()?;
        let Some(row) = row else { return Ok(None) };
        LastError::from_stored(
            id,
            row.get("first_failure_at"),
            row.get("at"),
            row.get("class"),
            row.get("code"),
            row.get("message"),
        )
        .map(Some)
    }

    async fn forget(&self, consumer: &str, id: MessageId) -> Result<()> {
        let sql = format!(
            "DELETE FROM {p}last_errors WHERE consumer = $1 AND message_id = $2",
            p = self.prefix
        );
        sqlx::query(&sql)
            .bind(consumer)
            .bind(id.as_uuid())
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(())
    }
}
