//! Backlog figures of a consumer in the embedded queue.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{from_ms, now_ms};
use postroom_core::{Backlog, BacklogProbe, Result, async_trait};
use sqlx::Row;

#[async_trait]
impl BacklogProbe for SqliteStore {
    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        let now = now_ms();
        let row = sqlx::query(
            "SELECT
                COALESCE(SUM(CASE WHEN visible_at <= ?2 AND (leased_until IS NULL OR leased_until < ?2) THEN 1 ELSE 0 END), 0) AS ready,
                COALESCE(SUM(CASE WHEN leased_until >= ?2 THEN 1 ELSE 0 END), 0) AS unacked,
                COALESCE(SUM(CASE WHEN visible_at > ?2 AND (leased_until IS NULL OR leased_until < ?2) THEN 1 ELSE 0 END), 0) AS delayed,
                MIN(CASE WHEN visible_at <= ?2 AND (leased_until IS NULL OR leased_until < ?2) THEN visible_at END) AS oldest
             FROM postroom_queue WHERE consumer = ?1",
        )
        .bind(consumer)
        .bind(now)
        .fetch_one(self.pool())
        .await
        .db()?;
        let oldest: Option<i64> = row.get("oldest");
        let backlog = Backlog {
            ready: row.get::<i64, _>("ready") as u64,
            unacked: row.get::<i64, _>("unacked") as u64,
            delayed: row.get::<i64, _>("delayed") as u64,
            oldest_ready_age: oldest.map(|t| {
                (chrono::Utc::now() - from_ms(t))
                    .to_std()
                    .unwrap_or_default()
            }),
        };
        let pm = postroom_core::metrics::OLDEST_READY_AGE;
        metrics::gauge!(pm, "consumer" => consumer.to_string())
            .set(backlog.oldest_ready_age.map_or(0.0, |d| d.as_secs_f64()));
        Ok(backlog)
    }
}
