//! The outbox on SQLite: [`enqueue`] (and [`schedule`], [`cancel`]) in the caller's
//! transaction, and [`OutboxStore`] for relays.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{due_ms, from_ms, ms, now_ms};
use postroom_core::message::truncate;
use postroom_core::outbox::{MAX_RELEASE_ERROR_CHARS, route_from_parts, route_parts};
use postroom_core::{
    MessageId, NotBefore, OutboxRecord, OutboxStore, OutgoingMessage, Result, ScheduledMessage,
    async_trait,
};
use sqlx::{Row, SqliteConnection};
use std::time::Duration;

/// Write `message` into the outbox inside the caller's transaction. Its order is kept under
/// [`OutgoingMessage::aggregate_key`] (the `x-aggregate-key` header, else the id).
pub async fn enqueue(conn: &mut SqliteConnection, message: &OutgoingMessage) -> Result<()> {
    let (kind, route) = route_parts(&message.route);
    let key = message.aggregate_key();
    let now = now_ms();
    sqlx::query(
        "INSERT INTO postroom_outbox (message_id, route_kind, route, headers, body, aggregate_key, created_at, available_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(message.id.to_string())
    .bind(kind)
    .bind(route)
    .bind(serde_json::to_string(&message.headers).expect("headers serialise"))
    .bind(&message.body)
    .bind(key)
    .bind(now)
    .bind(now)
    .execute(conn)
    .await
    .db()?;
    Ok(())
}

/// The first stored millisecond at or after `at`: a row due then is never claimed before `at`.
fn ceil_ms(at: chrono::DateTime<chrono::Utc>) -> i64 {
    at.timestamp_micros().saturating_add(999).div_euclid(1000)
}

/// Write `message` into the outbox inside the caller's transaction, to be published not
/// before its time ([`postroom_core::schedule`]): no relay claims it earlier. It is ordered
/// under its own id, so it neither waits behind its aggregate's other rows nor holds them
/// back. [`cancel`] removes it until a relay takes it.
pub async fn schedule(conn: &mut SqliteConnection, message: &ScheduledMessage) -> Result<()> {
    let m = &message.message;
    let (kind, route) = route_parts(&m.route);
    let now = now_ms();
    let due = match message.not_before {
        NotBefore::At(at) => ceil_ms(at),
        NotBefore::After(delay) => due_ms(delay),
    };
    sqlx::query(
        "INSERT INTO postroom_outbox (message_id, route_kind, route, headers, body, aggregate_key, created_at, available_at, not_before)
         VALUES (?1, ?2, ?3, ?4, ?5, ?1, ?6, ?7, ?7)",
    )
    .bind(m.id.to_string())
    .bind(kind)
    .bind(route)
    .bind(serde_json::to_string(&m.headers).expect("headers serialise"))
    .bind(&m.body)
    .bind(now)
    .bind(due)
    .execute(conn)
    .await
    .db()?;
    Ok(())
}

/// Remove the scheduled row `id` inside the caller's transaction, if no relay has taken it:
/// true if it was removed (it will not be published), false if it was published, is being
/// published (a relay holds its lease), is not a scheduled row, or is unknown.
///
/// A relay that published the row and died before marking it leaves the row looking unsent
/// once its lease has run out: a cancel then removes it and says true, though the broker has
/// the message (as at-least-once delivery allows a copy, the consumers' inbox sees it once).
pub async fn cancel(conn: &mut SqliteConnection, id: MessageId) -> Result<bool> {
    let done = sqlx::query(
        "DELETE FROM postroom_outbox
         WHERE message_id = ? AND published_at IS NULL AND not_before IS NOT NULL
           AND (locked_until IS NULL OR locked_until < ?)",
    )
    .bind(id.to_string())
    .bind(now_ms())
    .execute(conn)
    .await
    .db()?;
    Ok(done.rows_affected() > 0)
}

fn record(row: &sqlx::sqlite::SqliteRow) -> Result<OutboxRecord> {
    let id: String = row.get("message_id");
    let kind: String = row.get("route_kind");
    let route: String = row.get("route");
    let headers: String = row.get("headers");
    Ok(OutboxRecord {
        id: id.parse().map_err(|e| {
            postroom_core::Error::new(
                postroom_core::ErrorKind::InvalidData,
                format!("bad id {id}: {e}"),
            )
        })?,
        route: route_from_parts(&kind, route)?,
        headers: serde_json::from_str(&headers).unwrap_or_default(),
        body: row.get("body"),
        aggregate_key: row.get("aggregate_key"),
        created_at: from_ms(row.get("created_at")),
        publish_attempts: row.get::<i64, _>("publish_attempts") as u32,
    })
}

#[async_trait]
impl OutboxStore for SqliteStore {
    async fn claim(
        &self,
        relay_id: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxRecord>> {
        let _turn = self.write_turn().await;
        let now = now_ms();
        // One statement: select the head of each aggregate (no earlier unpublished row of the
        // same aggregate) and lease it. Scheduled rows that fell due come first (they are
        // late already), found by due time; each is its own aggregate. Rows not yet due are
        // in neither index walked.
        let rows = sqlx::query(
            "UPDATE postroom_outbox SET locked_by = ?3, locked_until = ?4
             WHERE seq IN (
               SELECT seq FROM (
                 SELECT 0 AS scheduled, seq, seq AS rank FROM (
                   SELECT o.seq FROM postroom_outbox o
                   WHERE o.published_at IS NULL AND o.not_before IS NULL AND o.available_at <= ?1
                     AND (o.locked_until IS NULL OR o.locked_until < ?1)
                     AND NOT EXISTS (SELECT 1 FROM postroom_outbox p
                                     WHERE p.aggregate_key = o.aggregate_key AND p.published_at IS NULL AND p.seq < o.seq)
                   ORDER BY o.seq LIMIT ?2)
                 UNION ALL
                 SELECT 1 AS scheduled, seq, not_before AS rank FROM (
                   SELECT s.seq, s.not_before FROM postroom_outbox s
                   WHERE s.published_at IS NULL AND s.not_before IS NOT NULL AND s.not_before <= ?1
                     AND s.available_at <= ?1 AND (s.locked_until IS NULL OR s.locked_until < ?1)
                   ORDER BY s.not_before LIMIT ?2))
               ORDER BY scheduled DESC, rank LIMIT ?2)
             RETURNING *",
        )
        .bind(now)
        .bind(limit as i64)
        .bind(relay_id)
        .bind(now + ms(lease))
        .fetch_all(self.pool())
        .await
        .db()?;
        let mut rows: Vec<_> = rows
            .iter()
            .map(|r| (r.get::<i64, _>("seq"), record(r)))
            .collect();
        rows.sort_by_key(|(seq, _)| *seq);
        rows.into_iter().map(|(_, r)| r).collect()
    }

    async fn mark_published(&self, _relay_id: &str, ids: &[MessageId]) -> Result<()> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let _turn = self.write_turn().await;
        sqlx::query(
            "UPDATE postroom_outbox SET published_at = ?, locked_by = NULL, locked_until = NULL
             WHERE message_id IN (SELECT value FROM json_each(?))",
        )
        .bind(now_ms())
        .bind(serde_json::to_string(&ids).expect("ids serialise"))
        .execute(self.pool())
        .await
        .db()?;
        Ok(())
    }

    async fn release(
        &self,
        relay_id: &str,
        id: MessageId,
        error: &str,
        retry_after: Duration,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE postroom_outbox SET locked_by = NULL, locked_until = NULL, available_at = ?,
                    publish_attempts = publish_attempts + 1, last_error = ?
             WHERE message_id = ? AND locked_by = ? AND published_at IS NULL",
        )
        .bind(now_ms() + ms(retry_after))
        .bind(truncate(error, MAX_RELEASE_ERROR_CHARS))
        .bind(id.to_string())
        .bind(relay_id)
        .execute(&self.pool)
        .await
        .db()?;
        Ok(())
    }

    async fn purge_published(&self, older_than: Duration) -> Result<u64> {
        let r = sqlx::query(
            "DELETE FROM postroom_outbox WHERE published_at IS NOT NULL AND published_at < ?",
        )
        .bind(now_ms() - ms(older_than))
        .execute(&self.pool)
        .await
        .db()?;
        Ok(r.rows_affected())
    }

    async fn pending(&self) -> Result<u64> {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM postroom_outbox WHERE published_at IS NULL")
                .fetch_one(&self.pool)
                .await
                .db()?;
        Ok(n as u64)
    }

    async fn wait_for_rows(&self, _relay_id: &str, max_wait: Duration) {
        // SQLite has no notifications across processes: poll cheaply until rows appear.
        let deadline = tokio::time::Instant::now() + max_wait;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20).min(max_wait)).await;
            // Due scheduled rows are looked for by due time, so that rows not yet due are not
            // scanned every 20 ms.
            let ready: Option<i64> = sqlx::query_scalar(
                "SELECT 1 WHERE EXISTS (SELECT 1 FROM postroom_outbox
                                        WHERE published_at IS NULL AND not_before IS NULL AND available_at <= ?1)
                             OR EXISTS (SELECT 1 FROM postroom_outbox
                                        WHERE published_at IS NULL AND not_before IS NOT NULL AND not_before <= ?1
                                          AND available_at <= ?1)",
            )
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .unwrap_or(None);
            if ready.is_some() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::OutgoingMessage;
    use postroom_testkit::cases::order;
    use std::time::Duration;

    /// `write` stays pending while another write holds the store's turn, and finishes once
    /// the turn is free.
    async fn waits_for_the_turn<T>(
        store: &SqliteStore,
        write: impl Future<Output = T>,
        what: &str,
    ) -> T {
        let turn = store.write_turn().await;
        tokio::pin!(write);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut write)
                .await
                .is_err(),
            "the {what} went ahead while another write held the turn"
        );
        drop(turn);
        write.await
    }

    /// The relay's marks and claims wait for the turn of the store's own writes (so that they
    /// and the queue's publishes queue in order instead of sleeping in SQLite's busy
    /// handler), and go ahead once it is free.
    #[tokio::test]
    async fn marks_and_claims_wait_for_the_stores_write_turn() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("turn.db")).await.unwrap();
        let m = OutgoingMessage::from_envelope(&order("o-1", 1), "order.created");
        let mut tx = store.begin().await.unwrap();
        enqueue(&mut tx, &m).await.unwrap();
        tx.commit().await.unwrap();

        let claim = store.claim("r", 10, Duration::from_secs(30));
        let claimed = waits_for_the_turn(&store, claim, "claim").await.unwrap();
        assert_eq!(claimed.len(), 1);

        let ids = [m.id];
        let mark = store.mark_published("r", &ids);
        waits_for_the_turn(&store, mark, "mark").await.unwrap();
        assert_eq!(store.pending().await.unwrap(), 0);
    }
}
