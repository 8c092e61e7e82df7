//! The parking lot in PostgreSQL: parked messages with every diagnostic, searched with
//! the exact semantics of [`ParkingFilter::matches`], and resumable redrive runs.

mod archive;
mod audit;
mod filter;
mod redrive;
pub(crate) mod row;

use crate::error::SqlxResultExt;
use crate::fetch_count;
use crate::schema::TablePrefix;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use postroom_core::{MessageId, ParkedMessage, ParkingFilter, ParkingStore, RedriveRun, Result};
use sqlx::PgPool;

/// The parking store.
#[derive(Clone, Debug)]
pub struct PgParking {
    pool: PgPool,
    prefix: TablePrefix,
}

impl PgParking {
    /// The parking lot in `pool` under `prefix` (migrated beforehand).
    #[must_use]
    pub fn new(pool: PgPool, prefix: TablePrefix) -> Self {
        Self { pool, prefix }
    }
}

fn limit_of(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

#[async_trait]
impl ParkingStore for PgParking {
    async fn park(&self, message: &ParkedMessage) -> Result<()> {
        let mut conn = self.pool.acquire().await.pg()?;
        row::insert(&mut conn, &self.prefix, message).await
    }

    async fn search(&self, f: &ParkingFilter, limit: usize) -> Result<Vec<ParkedMessage>> {
        let sql = format!(
            "SELECT {cols} FROM {p}parked WHERE {w} ORDER BY parked_at, consumer, message_id LIMIT $9",
            cols = row::COLUMNS,
            p = self.prefix,
            w = filter::WHERE
        );
        row::fetch_all(
            &self.pool,
            filter::bind(sqlx::query(&sql), f).bind(limit_of(limit)),
        )
        .await
    }

    async fn count(&self, f: &ParkingFilter) -> Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM {p}parked WHERE {w}",
            p = self.prefix,
            w = filter::WHERE
        );
        fetch_count(&self.pool, filter::bind(sqlx::query(&sql), f)).await
    }

    async fn get(&self, id: MessageId) -> Result<Vec<ParkedMessage>> {
        let sql = format!(
            "SELECT {cols} FROM {p}parked WHERE message_id = $1 ORDER BY consumer",
            cols = row::COLUMNS,
            p = self.prefix
        );
        row::fetch_all(&self.pool, sqlx::query(&sql).bind(id.as_uuid())).await
    }

    async fn create_redrive_run(
        &self,
        f: &ParkingFilter,
        limit: usize,
        operator: &str,
    ) -> Result<RedriveRun> {
        redrive::create(&self.pool, &self.prefix, f, limit, operator).await
    }

    async fn redrive_run(&self, run_id: &str) -> Result<Option<RedriveRun>> {
        redrive::run(&self.pool, &self.prefix, run_id).await
    }

    async fn redrive_runs(&self, limit: usize) -> Result<Vec<RedriveRun>> {
        redrive::runs(&self.pool, &self.prefix, limit).await
    }

    async fn redrive_pending(&self, run_id: &str, limit: usize) -> Result<Vec<ParkedMessage>> {
        redrive::pending(&self.pool, &self.prefix, run_id, limit).await
    }

    async fn mark_redriven(&self, run_id: &str, sent: &ParkedMessage) -> Result<bool> {
        redrive::mark(&self.pool, &self.prefix, run_id, sent).await
    }

    async fn mark_redrive_skipped(
        &self,
        run_id: &str,
        skipped: &ParkedMessage,
        reason: &str,
    ) -> Result<()> {
        redrive::skip(&self.pool, &self.prefix, run_id, skipped, reason).await
    }

    async fn purge(&self, before: DateTime<Utc>) -> Result<u64> {
        let sql = format!(
            "DELETE FROM {p}parked WHERE parked_at < $1",
            p = self.prefix
        );
        let done = sqlx::query(&sql)
            .bind(before)
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(done.rows_affected())
    }
}
