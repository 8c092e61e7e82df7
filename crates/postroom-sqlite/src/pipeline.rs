//! Figures of the pipeline for an operations console: which consumers exist, how deep each
//! retry stage is, the relay's lag, and what consumers did lately.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{from_ms, now_ms};
use chrono::{DateTime, Utc};
use postroom_core::Result;
use std::time::Duration;

impl SqliteStore {
    /// Consumers bound to the embedded queue or owning parked messages, by name.
    pub async fn consumer_names(&self) -> Result<Vec<String>> {
        sqlx::query_scalar(
            "SELECT consumer FROM postroom_subscriptions UNION SELECT consumer FROM postroom_parking ORDER BY 1",
        )
        .fetch_all(self.pool())
        .await
        .db()
    }

    /// Messages of `consumer` waiting in each retry stage of the embedded queue, by stage
    /// index (stages with none are left out).
    pub async fn stage_depths(&self, consumer: &str) -> Result<Vec<(usize, u64)>> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT stage, COUNT(*) FROM postroom_queue
             WHERE consumer = ? AND stage IS NOT NULL AND visible_at > ? GROUP BY stage ORDER BY stage",
        )
        .bind(consumer)
        .bind(now_ms())
        .fetch_all(self.pool())
        .await
        .db()?;
        Ok(rows
            .into_iter()
            .map(|(s, n)| (s.max(0) as usize, n.max(0) as u64))
            .collect())
    }

    /// Age of the oldest unpublished outbox row (the relay's lag), `None` when every row
    /// is published. A scheduled row counts from its due time, and not before it.
    pub async fn relay_lag(&self) -> Result<Option<Duration>> {
        let oldest: Option<i64> = sqlx::query_scalar(
            "SELECT MIN(t) FROM (
               SELECT MIN(created_at) AS t FROM postroom_outbox WHERE published_at IS NULL AND not_before IS NULL
               UNION ALL
               SELECT MIN(MAX(not_before, created_at)) FROM postroom_outbox
               WHERE published_at IS NULL AND not_before IS NOT NULL AND not_before <= ?)",
        )
        .bind(now_ms())
        .fetch_one(self.pool())
        .await
        .db()?;
        Ok(oldest.map(|t| (Utc::now() - from_ms(t)).to_std().unwrap_or_default()))
    }

    /// Scheduled outbox rows not yet due, and when the first of them falls due.
    pub async fn scheduled_rows(&self) -> Result<(u64, Option<DateTime<Utc>>)> {
        let (n, next): (i64, Option<i64>) = sqlx::query_as(
            "SELECT COUNT(*), MIN(not_before) FROM postroom_outbox
             WHERE published_at IS NULL AND not_before IS NOT NULL AND not_before > ?",
        )
        .bind(now_ms())
        .fetch_one(self.pool())
        .await
        .db()?;
        Ok((n.max(0) as u64, next.map(from_ms)))
    }

    /// Messages `consumer` handled (inbox rows) and parked since `since`.
    pub async fn activity_since(&self, consumer: &str, since: DateTime<Utc>) -> Result<(u64, u64)> {
        let t = since.timestamp_millis();
        let (handled, parked): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM postroom_inbox WHERE consumer = ?1 AND processed_at >= ?2),
                    (SELECT COUNT(*) FROM postroom_parking WHERE consumer = ?1 AND parked_at >= ?2)",
        )
        .bind(consumer)
        .bind(t)
        .fetch_one(self.pool())
        .await
        .db()?;
        Ok((handled.max(0) as u64, parked.max(0) as u64))
    }
}
