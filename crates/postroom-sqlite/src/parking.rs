//! The parking lot and redrive audit on SQLite.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{from_ms, now_ms};
use chrono::{DateTime, Utc};
use postroom_core::{
    Error, ErrorClass, ErrorKind, MessageId, ParkedMessage, ParkedStatus, ParkingFilter,
    ParkingStore, RedriveRun, Result, async_trait,
};
use sqlx::sqlite::SqliteRow;
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};

/// Insert or replace a parked message inside an open transaction (used by the queue's park).
pub(crate) async fn insert(conn: &mut SqliteConnection, m: &ParkedMessage) -> Result<()> {
    sqlx::query(
        "INSERT INTO postroom_parking (consumer, message_id, consumer_version, message_type, schema_version, attempts,
            first_failure_at, parked_at, error_class, error_code, error_message, correlation_id, traceparent, routing_key,
            producer, headers, body, status, redrive_count)
         VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'parked',?)
         ON CONFLICT (consumer, message_id) DO UPDATE SET
            consumer_version = excluded.consumer_version, message_type = excluded.message_type,
            schema_version = excluded.schema_version, attempts = excluded.attempts,
            first_failure_at = excluded.first_failure_at, parked_at = excluded.parked_at,
            error_class = excluded.error_class, error_code = excluded.error_code, error_message = excluded.error_message,
            correlation_id = excluded.correlation_id, traceparent = excluded.traceparent, routing_key = excluded.routing_key,
            producer = excluded.producer, headers = excluded.headers, body = excluded.body, status = 'parked',
            redrive_count = excluded.redrive_count, redriven_at = NULL",
    )
    .bind(&m.consumer)
    .bind(m.message_id.to_string())
    .bind(&m.consumer_version)
    .bind(&m.message_type)
    .bind(m.schema_version.map(i64::from))
    .bind(i64::from(m.attempts))
    .bind(m.first_failure_at.timestamp_millis())
    .bind(m.parked_at.timestamp_millis())
    .bind(m.error_class.as_str())
    .bind(&m.error_code)
    .bind(&m.error_message)
    .bind(&m.correlation_id)
    .bind(&m.traceparent)
    .bind(&m.routing_key)
    .bind(&m.producer)
    .bind(serde_json::to_string(&m.headers).expect("headers serialise"))
    .bind(&m.body)
    .bind(i64::from(m.redrive_count))
    .execute(conn)
    .await
    .db()?;
    Ok(())
}

/// A parking row whose `what` column holds `v`, which does not read back.
pub(crate) fn bad(what: &str, v: &str) -> Error {
    Error::new(
        ErrorKind::InvalidData,
        format!("parking row has bad {what}: {v}"),
    )
}

/// The message id of a parking row.
pub(crate) fn row_message_id(row: &SqliteRow) -> Result<MessageId> {
    let id: String = row.get("message_id");
    id.parse().map_err(|_| bad("id", &id))
}

/// The error class of a parking row.
pub(crate) fn row_error_class(row: &SqliteRow) -> Result<ErrorClass> {
    let class: String = row.get("error_class");
    class.parse().map_err(|_| bad("error class", &class))
}

/// The status of a parking row: one other than redriven reads as parked.
pub(crate) fn row_status(row: &SqliteRow) -> ParkedStatus {
    let status: String = row.get("status");
    status.parse().unwrap_or(ParkedStatus::Parked)
}

/// A parked message from a row of the parking table. A status other than redriven reads as
/// parked.
pub(crate) fn parked(row: &SqliteRow) -> Result<ParkedMessage> {
    let headers: String = row.get("headers");
    Ok(ParkedMessage {
        message_id: row_message_id(row)?,
        consumer: row.get("consumer"),
        consumer_version: row.get("consumer_version"),
        message_type: row.get("message_type"),
        schema_version: row
            .get::<Option<i64>, _>("schema_version")
            .map(|v| v as u32),
        attempts: row.get::<i64, _>("attempts") as u32,
        first_failure_at: from_ms(row.get("first_failure_at")),
        parked_at: from_ms(row.get("parked_at")),
        error_class: row_error_class(row)?,
        error_code: row.get("error_code"),
        error_message: row.get("error_message"),
        correlation_id: row.get("correlation_id"),
        traceparent: row.get("traceparent"),
        routing_key: row.get("routing_key"),
        producer: row.get("producer"),
        headers: serde_json::from_str(&headers).unwrap_or_default(),
        body: row.get("body"),
        status: row_status(row),
        redrive_count: row.get::<i64, _>("redrive_count") as u32,
    })
}

/// Append `WHERE …` for `f` (same semantics as [`ParkingFilter::matches`]).
pub(crate) fn push_filter(q: &mut QueryBuilder<'_, Sqlite>, f: &ParkingFilter) {
    q.push(" WHERE 1=1");
    if !f.include_redriven {
        q.push(" AND status = 'parked'");
    }
    if let Some(t) = &f.message_type {
        q.push(" AND message_type = ").push_bind(t.clone());
    }
    if let Some(c) = f.error_class {
        q.push(" AND error_class = ").push_bind(c.as_str());
    }
    if let Some(c) = &f.error_code {
        q.push(" AND error_code = ").push_bind(c.clone());
    }
    if let Some(c) = &f.consumer {
        q.push(" AND consumer = ").push_bind(c.clone());
    }
    if let Some(t) = f.since {
        q.push(" AND parked_at >= ").push_bind(t.timestamp_millis());
    }
    if let Some(t) = f.until {
        q.push(" AND parked_at < ").push_bind(t.timestamp_millis());
    }
    if !f.ids.is_empty() {
        q.push(" AND message_id IN (");
        let mut sep = q.separated(", ");
        for id in &f.ids {
            sep.push_bind(id.to_string());
        }
        q.push(")");
    }
}

async fn run_of(conn: &mut SqliteConnection, run_id: &str) -> Result<Option<RedriveRun>> {
    let row = sqlx::query(
        "SELECT r.*, (SELECT COUNT(*) FROM postroom_redrive_items i WHERE i.run_id = r.id AND i.done_at IS NOT NULL) AS done
         FROM postroom_redrive_runs r WHERE r.id = ?",
    )
    .bind(run_id)
    .fetch_optional(conn)
    .await
    .db()?;
    Ok(row.map(|r| run_row(&r)))
}

fn run_row(r: &SqliteRow) -> RedriveRun {
    RedriveRun {
        id: r.get("id"),
        created_at: from_ms(r.get("created_at")),
        operator: r.get("operator"),
        filter: r.get("filter"),
        total: r.get::<i64, _>("total") as u64,
        done: r.get::<i64, _>("done") as u64,
    }
}

#[async_trait]
impl ParkingStore for SqliteStore {
    async fn park(&self, message: &ParkedMessage) -> Result<()> {
        let mut tx = self.begin().await?;
        insert(&mut tx, message).await?;
        tx.commit().await.db()
    }

    async fn search(&self, filter: &ParkingFilter, limit: usize) -> Result<Vec<ParkedMessage>> {
        let mut q = QueryBuilder::<Sqlite>::new("SELECT * FROM postroom_parking");
        push_filter(&mut q, filter);
        q.push(" ORDER BY parked_at, message_id LIMIT ")
            .push_bind(limit as i64);
        let rows = q.build().fetch_all(self.pool()).await.db()?;
        rows.iter().map(parked).collect()
    }

    async fn count(&self, filter: &ParkingFilter) -> Result<u64> {
        let mut q = QueryBuilder::<Sqlite>::new("SELECT COUNT(*) FROM postroom_parking");
        push_filter(&mut q, filter);
        let n: i64 = q.build_query_scalar().fetch_one(self.pool()).await.db()?;
        Ok(n as u64)
    }

    async fn get(&self, id: MessageId) -> Result<Vec<ParkedMessage>> {
        let rows =
            sqlx::query("SELECT * FROM postroom_parking WHERE message_id = ? ORDER BY parked_at")
                .bind(id.to_string())
                .fetch_all(self.pool())
                .await
                .db()?;
        rows.iter().map(parked).collect()
    }

    async fn create_redrive_run(
        &self,
        filter: &ParkingFilter,
        limit: usize,
        operator: &str,
    ) -> Result<RedriveRun> {
        let f = filter.for_redrive();
        let id = uuid::Uuid::now_v7().to_string();
        let mut tx = self.begin().await?;
        let mut q =
            QueryBuilder::<Sqlite>::new("SELECT consumer, message_id FROM postroom_parking");
        push_filter(&mut q, &f);
        q.push(" ORDER BY parked_at, message_id LIMIT ")
            .push_bind(limit as i64);
        let chosen = q.build().fetch_all(&mut *tx).await.db()?;
        let filter_json = serde_json::to_string(&f).expect("filter serialises");
        sqlx::query("INSERT INTO postroom_redrive_runs (id, created_at, operator, filter, total) VALUES (?, ?, ?, ?, ?)")
            .bind(&id)
            .bind(now_ms())
            .bind(operator)
            .bind(filter_json)
            .bind(chosen.len() as i64)
            .execute(&mut *tx)
            .await
            .db()?;
        for row in &chosen {
            sqlx::query("INSERT INTO postroom_redrive_items (run_id, consumer, message_id) VALUES (?, ?, ?)")
                .bind(&id)
                .bind(row.get::<String, _>("consumer"))
                .bind(row.get::<String, _>("message_id"))
                .execute(&mut *tx)
                .await
                .db()?;
        }
        let run = run_of(&mut tx, &id).await?.expect("run just inserted");
        tx.commit().await.db()?;
        Ok(run)
    }

    async fn redrive_run(&self, run_id: &str) -> Result<Option<RedriveRun>> {
        let mut conn = self.pool().acquire().await.db()?;
        run_of(&mut conn, run_id).await
    }

    async fn redrive_runs(&self, limit: usize) -> Result<Vec<RedriveRun>> {
        let rows = sqlx::query(
            "SELECT r.*, (SELECT COUNT(*) FROM postroom_redrive_items i WHERE i.run_id = r.id AND i.done_at IS NOT NULL) AS done
             FROM postroom_redrive_runs r ORDER BY r.created_at DESC, r.id DESC LIMIT ?",
        )
        .bind(limit as i64)
        .fetch_all(self.pool())
        .await
        .db()?;
        Ok(rows.iter().map(run_row).collect())
    }

    async fn redrive_pending(&self, run_id: &str, limit: usize) -> Result<Vec<ParkedMessage>> {
        let rows = sqlx::query(
            "SELECT p.* FROM postroom_redrive_items i
             JOIN postroom_parking p ON p.consumer = i.consumer AND p.message_id = i.message_id
             WHERE i.run_id = ? AND i.done_at IS NULL ORDER BY p.parked_at, p.message_id LIMIT ?",
        )
        .bind(run_id)
        .bind(limit as i64)
        .fetch_all(self.pool())
        .await
        .db()?;
        rows.iter().map(parked).collect()
    }

    async fn mark_redriven(&self, run_id: &str, sent: &ParkedMessage) -> Result<bool> {
        let now = now_ms();
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE postroom_redrive_items SET done_at = ?, outcome = 'redriven' WHERE run_id = ? AND consumer = ? AND message_id = ?")
            .bind(now)
            .bind(run_id)
            .bind(&sent.consumer)
            .bind(sent.message_id.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
        // Only the parking that was read and sent back: a copy parked again since then has
        // another parked_at and a higher redrive_count, and stays parked.
        let marked = sqlx::query(
            "UPDATE postroom_parking SET status = 'redriven', redriven_at = ?, redrive_count = redrive_count + 1
             WHERE consumer = ? AND message_id = ? AND status = 'parked' AND parked_at = ? AND redrive_count = ?",
        )
        .bind(now)
        .bind(&sent.consumer)
        .bind(sent.message_id.to_string())
        .bind(sent.parked_at.timestamp_millis())
        .bind(i64::from(sent.redrive_count))
        .execute(&mut *tx)
        .await
        .db()?;
        tx.commit().await.db()?;
        Ok(marked.rows_affected() == 1)
    }

    async fn mark_redrive_skipped(
        &self,
        run_id: &str,
        skipped: &ParkedMessage,
        reason: &str,
    ) -> Result<()> {
        sqlx::query("UPDATE postroom_redrive_items SET done_at = ?, outcome = ? WHERE run_id = ? AND consumer = ? AND message_id = ? AND done_at IS NULL")
            .bind(now_ms())
            .bind(reason)
            .bind(run_id)
            .bind(&skipped.consumer)
            .bind(skipped.message_id.to_string())
            .execute(self.pool())
            .await
            .db()?;
        Ok(())
    }

    async fn purge(&self, before: DateTime<Utc>) -> Result<u64> {
        let r = sqlx::query("DELETE FROM postroom_parking WHERE parked_at < ?")
            .bind(before.timestamp_millis())
            .execute(self.pool())
            .await
            .db()?;
        Ok(r.rows_affected())
    }
}
