//! Figures of the pipeline for an operations console: which consumers exist, how many
//! messages wait for each retry of the table queue, the relay's lag, and what consumers did
//! lately.

use crate::PgStore;
use crate::error::SqlxResultExt;
use chrono::{DateTime, Utc};
use postroom_core::Result;
use std::time::Duration;

impl PgStore {
    /// Consumers bound to the table queue or owning parked messages, by name.
    pub async fn consumer_names(&self) -> Result<Vec<String>> {
        sqlx::query_scalar(&format!(
            "SELECT consumer FROM {p}subscriptions UNION SELECT consumer FROM {p}parked ORDER BY 1",
            p = self.prefix()
        ))
        .fetch_all(self.pool())
        .await
        .pg()
    }

    /// Messages of `consumer` waiting in the table queue for their retry, by attempt number
    /// (attempts with none are left out).
    pub async fn retry_depths(&self, consumer: &str) -> Result<Vec<(u32, u64)>> {
        let rows: Vec<(i32, i64)> = sqlx::query_as(&format!(
            "SELECT attempt, count(*) FROM {p}queue
             WHERE consumer = $1 AND attempt > 0 AND visible_at > now()
               AND (leased_until IS NULL OR leased_until < now())
             GROUP BY attempt ORDER BY attempt",
            p = self.prefix()
        ))
        .bind(consumer)
        .fetch_all(self.pool())
        .await
        .pg()?;
        Ok(rows
            .into_iter()
            .map(|(a, n)| (u32::try_from(a).unwrap_or(0), u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    /// Age of the oldest unpublished outbox row (the relay's lag), `None` when every row is
    /// published. A scheduled row counts from its due time, and not before it.
    pub async fn relay_lag(&self) -> Result<Option<Duration>> {
        let secs: Option<f64> = sqlx::query_scalar(&format!(
            "SELECT EXTRACT(EPOCH FROM now() - least(
                 (SELECT min(created_at) FROM {p}outbox WHERE published_at IS NULL AND not_before IS NULL),
                 (SELECT min(greatest(not_before, created_at)) FROM {p}outbox
                  WHERE published_at IS NULL AND not_before IS NOT NULL AND not_before <= now())))::float8",
            p = self.prefix()
        ))
        .fetch_one(self.pool())
        .await
        .pg()?;
        Ok(secs.map(crate::seconds))
    }

    /// Scheduled outbox rows not yet due, and when the first of them falls due.
    pub async fn scheduled_rows(&self) -> Result<(u64, Option<DateTime<Utc>>)> {
        let (n, next): (i64, Option<DateTime<Utc>>) = sqlx::query_as(&format!(
            "SELECT count(*), min(not_before) FROM {p}outbox
             WHERE published_at IS NULL AND not_before IS NOT NULL AND not_before > now()",
            p = self.prefix()
        ))
        .fetch_one(self.pool())
        .await
        .pg()?;
        Ok((u64::try_from(n).unwrap_or(0), next))
    }

    /// Messages `consumer` handled (inbox rows) and parked since `since`.
    pub async fn activity_since(&self, consumer: &str, since: DateTime<Utc>) -> Result<(u64, u64)> {
        let (handled, parked): (i64, i64) = sqlx::query_as(&format!(
            "SELECT (SELECT count(*) FROM {p}inbox WHERE consumer = $1 AND processed_at >= $2),
                    (SELECT count(*) FROM {p}parked WHERE consumer = $1 AND parked_at >= $2)",
            p = self.prefix()
        ))
        .bind(consumer)
        .bind(since)
        .fetch_one(self.pool())
        .await
        .pg()?;
        Ok((
            u64::try_from(handled).unwrap_or(0),
            u64::try_from(parked).unwrap_or(0),
        ))
    }
}
