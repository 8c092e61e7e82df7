//! The audit of operators' state changes, and the live state of redrive runs driven from a
//! console (rate, paused or cancelled, messages that joined the group meanwhile).

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::from_ms;
use postroom_core::{AuditEntry, AuditLog, Error, ErrorKind, Result, RunControl, async_trait};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

fn entry(r: &SqliteRow) -> AuditEntry {
    let detail: String = r.get("detail");
    AuditEntry {
        id: r.get("id"),
        at: from_ms(r.get("at")),
        actor: r.get("actor"),
        action: r.get("action"),
        target: r.get("target"),
        detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail)),
    }
}

fn control(r: &SqliteRow) -> Result<RunControl> {
    let state: String = r.get("state");
    Ok(RunControl {
        run_id: r.get("run_id"),
        state: state
            .parse()
            .map_err(|e: String| Error::new(ErrorKind::InvalidData, e))?,
        rate: r.get("rate"),
        group_key: r.get("group_key"),
        started_by: r.get("started_by"),
        started_at: from_ms(r.get("started_at")),
        updated_at: from_ms(r.get("updated_at")),
        joined: r.get::<i64, _>("joined") as u64,
        error: r.get("error"),
    })
}

#[async_trait]
impl AuditLog for SqliteStore {
    /// Append `e` to the audit (its `id` is ignored). Returns the stored id.
    async fn append_audit(&self, e: &AuditEntry) -> Result<i64> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO postroom_audit (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(e.at.timestamp_millis())
        .bind(&e.actor)
        .bind(&e.action)
        .bind(&e.target)
        .bind(e.detail.to_string())
        .fetch_one(self.pool())
        .await
        .db()?;
        Ok(id)
    }

    /// A page of audit entries, newest first, below id `before` when given, at most
    /// `limit`; only those about `target` when given.
    async fn audit_page(
        &self,
        target: Option<&str>,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>> {
        let rows = sqlx::query(
            "SELECT * FROM postroom_audit WHERE (?1 IS NULL OR target = ?1) AND (?2 IS NULL OR id < ?2)
             ORDER BY id DESC LIMIT ?3",
        )
        .bind(target)
        .bind(before)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await
        .db()?;
        Ok(rows.iter().map(entry).collect())
    }

    /// Store `c` (insert or replace by run id).
    async fn save_run_control(&self, c: &RunControl) -> Result<()> {
        sqlx::query(
            "INSERT INTO postroom_redrive_control (run_id, state, rate, group_key, started_by, started_at, updated_at, joined, error)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (run_id) DO UPDATE SET state = excluded.state, rate = excluded.rate,
                updated_at = excluded.updated_at, joined = excluded.joined, error = excluded.error",
        )
        .bind(&c.run_id)
        .bind(c.state.as_str())
        .bind(c.rate)
        .bind(&c.group_key)
        .bind(&c.started_by)
        .bind(c.started_at.timestamp_millis())
        .bind(c.updated_at.timestamp_millis())
        .bind(c.joined as i64)
        .bind(&c.error)
        .execute(self.pool())
        .await
        .db()?;
        Ok(())
    }

    /// The control of run `run_id`, if a console drove it.
    async fn run_control(&self, run_id: &str) -> Result<Option<RunControl>> {
        let row = sqlx::query("SELECT * FROM postroom_redrive_control WHERE run_id = ?")
            .bind(run_id)
            .fetch_optional(self.pool())
            .await
            .db()?;
        row.as_ref().map(control).transpose()
    }
}
