//! The inbox on SQLite (R5): claim `(consumer, message_id)` in the business transaction.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{ms, now_ms};
use postroom_core::{MessageId, Result};
use sqlx::SqliteConnection;
use std::time::Duration;

/// Claim the inbox row inside the caller's transaction. `true` the first time, `false` for a
/// duplicate delivery: then apply nothing, commit (or roll back) and acknowledge.
pub async fn claim(conn: &mut SqliteConnection, consumer: &str, id: MessageId) -> Result<bool> {
    let r = sqlx::query("INSERT OR IGNORE INTO postroom_inbox (consumer, message_id, processed_at) VALUES (?, ?, ?)")
        .bind(consumer)
        .bind(id.to_string())
        .bind(now_ms())
        .execute(conn)
        .await
        .db()?;
    Ok(r.rows_affected() == 1)
}

impl SqliteStore {
    /// Delete inbox rows older than `replay_window`. Choose a window longer than any redelivery,
    /// retry ladder, redrive or replay can take, or a late copy is applied again.
    pub async fn purge_inbox(&self, replay_window: Duration) -> Result<u64> {
        let r = sqlx::query("DELETE FROM postroom_inbox WHERE processed_at < ?")
            .bind(now_ms() - ms(replay_window))
            .execute(self.pool())
            .await
            .db()?;
        Ok(r.rows_affected())
    }
}
