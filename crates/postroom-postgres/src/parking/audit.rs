//! The audit of operators' state changes, and the live state of redrive runs driven from a
//! console (rate, paused or cancelled, messages that joined the group meanwhile).

use super::{PgParking, limit_of};
use crate::error::SqlxResultExt;
use postroom_core::{AuditEntry, AuditLog, Error, ErrorKind, Result, RunControl, async_trait};
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

fn entry(r: &PgRow) -> Result<AuditEntry> {
    let detail: Json<serde_json::Value> = r.try_get("detail").pg()?;
    Ok(AuditEntry {
        id: r.try_get("id").pg()?,
        at: r.try_get("at").pg()?,
        actor: r.try_get("actor").pg()?,
        action: r.try_get("action").pg()?,
        target: r.try_get("target").pg()?,
        detail: detail.0,
    })
}

fn control(r: &PgRow) -> Result<RunControl> {
    let state: String = r.try_get("state").pg()?;
    let joined: i64 = r.try_get("joined").pg()?;
    Ok(RunControl {
        run_id: r.try_get("run_id").pg()?,
        state: state
            .parse()
            .map_err(|e: String| Error::new(ErrorKind::InvalidData, e))?,
        rate: r.try_get("rate").pg()?,
        group_key: r.try_get("group_key").pg()?,
        started_by: r.try_get("started_by").pg()?,
        started_at: r.try_get("started_at").pg()?,
        updated_at: r.try_get("updated_at").pg()?,
        joined: u64::try_from(joined).unwrap_or(0),
        error: r.try_get("error").pg()?,
    })
}

#[async_trait]
impl AuditLog for PgParking {
    /// Append `e` to the audit (its `id` is ignored). Returns the stored id.
    async fn append_audit(&self, e: &AuditEntry) -> Result<i64> {
        sqlx::query_scalar(&format!(
            "INSERT INTO {p}audit (at, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5) RETURNING id",
            p = self.prefix
        ))
        .bind(e.at)
        .bind(&e.actor)
        .bind(&e.action)
        .bind(&e.target)
        .bind(Json(&e.detail))
        .fetch_one(&self.pool)
        .await
        .pg()
    }

    /// A page of audit entries, newest first, below id `before` when given, at most
    /// `limit`; only those about `target` when given.
    async fn audit_page(
        &self,
        target: Option<&str>,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>> {
        let rows = sqlx::query(&format!(
            "SELECT id, at, actor, action, target, detail FROM {p}audit
             WHERE ($1::text IS NULL OR target = $1) AND ($2::bigint IS NULL OR id < $2)
             ORDER BY id DESC LIMIT $3",
            p = self.prefix
        ))
        .bind(target)
        .bind(before)
        .bind(limit_of(limit))
        .fetch_all(&self.pool)
        .await
        .pg()?;
        rows.iter().map(entry).collect()
    }

    /// Store `c` (insert or replace by run id).
    async fn save_run_control(&self, c: &RunControl) -> Result<()> {
        sqlx::query(&format!(
            "INSERT INTO {p}redrive_control (run_id, state, rate, group_key, started_by, started_at, updated_at, joined, error)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (run_id) DO UPDATE SET state = EXCLUDED.state, rate = EXCLUDED.rate,
                updated_at = EXCLUDED.updated_at, joined = EXCLUDED.joined, error = EXCLUDED.error",
            p = self.prefix
        ))
        .bind(&c.run_id)
        .bind(c.state.as_str())
        .bind(c.rate)
        .bind(&c.group_key)
        .bind(&c.started_by)
        .bind(c.started_at)
        .bind(c.updated_at)
        .bind(i64::try_from(c.joined).unwrap_or(i64::MAX))
        .bind(&c.error)
        .execute(&self.pool)
        .await
        .pg()?;
        Ok(())
    }

    /// The control of run `run_id`, if a console drove it.
    async fn run_control(&self, run_id: &str) -> Result<Option<RunControl>> {
        let row = sqlx::query(&format!(
            "SELECT * FROM {p}redrive_control WHERE run_id = $1",
            p = self.prefix
        ))
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .pg()?;
        row.as_ref().map(control).transpose()
    }
}
