//! The inbox on SQLite: claim `(consumer, message_id)` in the business transaction, one id
//! or a whole batch.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{ms, now_ms};
use postroom_core::inbox::{LOOKUP_CHUNK, new_in_order};
use postroom_core::{InboxLookup, MessageId, Result, async_trait};
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

/// Claim the inbox rows of a batch inside the caller's transaction, in one statement; returns
/// the ids that were new (apply those), in the order given. Repeated ids in `ids` count once.
pub async fn claim_many(
    conn: &mut SqliteConnection,
    consumer: &str,
    ids: &[MessageId],
) -> Result<Vec<MessageId>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let now = now_ms();
    let mut new = std::collections::HashSet::new();
    // SQLite binds at most 32766 parameters; three per row.
    for chunk in ids.chunks(10_000) {
        let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT OR IGNORE INTO postroom_inbox (consumer, message_id, processed_at) ",
        );
        q.push_values(chunk, |mut row, id| {
            row.push_bind(consumer)
                .push_bind(id.to_string())
                .push_bind(now);
        });
        q.push(" RETURNING message_id");
        let rows: Vec<String> = q.build_query_scalar().fetch_all(&mut *conn).await.db()?;
        new.extend(rows);
    }
    Ok(new_in_order(ids, |id| new.contains(&id.to_string())))
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

/// What redrive asks before it sends a parked message back.
#[async_trait]
impl InboxLookup for SqliteStore {
    async fn contains(&self, consumer: &str, id: MessageId) -> Result<bool> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM postroom_inbox WHERE consumer = ? AND message_id = ?)",
        )
        .bind(consumer)
        .bind(id.to_string())
        .fetch_one(self.pool())
        .await
        .db()
    }

    async fn count(&self, consumer: &str) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM postroom_inbox WHERE consumer = ?")
            .bind(consumer)
            .fetch_one(self.pool())
            .await
            .db()?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// One statement per [`LOOKUP_CHUNK`] pairs, given as a JSON array of `[consumer, id]`:
    /// the positions (from 0) of those applied.
    async fn contains_each(&self, items: &[(&str, MessageId)]) -> Result<Vec<bool>> {
        let mut held = vec![false; items.len()];
        for (chunk, part) in items.chunks(LOOKUP_CHUNK).enumerate() {
            let pairs: Vec<(&str, String)> =
                part.iter().map(|(c, id)| (*c, id.to_string())).collect();
            let applied: Vec<i64> = sqlx::query_scalar(
                "SELECT w.key FROM json_each(?) AS w
                 WHERE EXISTS (SELECT 1 FROM postroom_inbox i
                               WHERE i.consumer = json_extract(w.value, '$[0]')
                                 AND i.message_id = json_extract(w.value, '$[1]'))",
            )
            .bind(serde_json::to_string(&pairs).expect("pairs of strings serialise"))
            .fetch_all(self.pool())
            .await
            .db()?;
            for pos in applied {
                let at = usize::try_from(pos).ok().map(|i| chunk * LOOKUP_CHUNK + i);
                if let Some(slot) = at.and_then(|i| held.get_mut(i)) {
                    *slot = true;
                }
            }
        }
        Ok(held)
    }
}
