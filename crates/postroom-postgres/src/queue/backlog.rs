//! Backlog figures of a consumer's queue.

use super::PgQueue;
use crate::error::SqlxResultExt;
use async_trait::async_trait;
use postroom_core::{Backlog, BacklogProbe, Result};
use sqlx::Row;

#[async_trait]
impl BacklogProbe for PgQueue {
    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        let sql = format!(
            "WITH s AS (
                SELECT visible_at <= now() AND (leased_until IS NULL OR leased_until < now()) AS ready,
                       leased_until IS NOT NULL AND leased_until >= now() AS unacked,
                       visible_at
                FROM {p}queue WHERE consumer = $1)
             SELECT count(*) FILTER (WHERE ready) AS ready,
                    count(*) FILTER (WHERE unacked) AS unacked,
                    count(*) FILTER (WHERE NOT ready AND NOT unacked) AS delayed,
                    EXTRACT(EPOCH FROM now() - min(visible_at) FILTER (WHERE ready))::float8 AS oldest
             FROM s",
            p = self.prefix
        );
        let r = sqlx::query(&sql)
            .bind(consumer)
            .fetch_one(&self.pool)
            .await
            .pg()?;
        let count = |name: &str| -> Result<u64> {
            let n: i64 = r.try_get(name).pg()?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        let oldest: Option<f64> = r.try_get("oldest").pg()?;
        Ok(Backlog {
            ready: count("ready")?,
            unacked: count("unacked")?,
            delayed: count("delayed")?,
            oldest_ready_age: oldest.map(crate::seconds),
        })
    }
}
