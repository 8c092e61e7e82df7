//! Redrive runs: the selection is recorded item by item when the run is created, and each
//! item is marked when sent back, so an interrupted run resumes with what is still pending
//! and the audit shows exactly which ids went back.

use super::{filter, limit_of, row};
use crate::error::{SqlxResultExt, commit};
use crate::schema::TablePrefix;
use postroom_core::{ParkedMessage, ParkingFilter, RedriveRun, Result};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

const RUN_COLUMNS: &str = "id, created_at, operator, filter, total, done";

fn run_of(r: &PgRow) -> Result<RedriveRun> {
    let total: i64 = r.try_get("total").pg()?;
    let done: i64 = r.try_get("done").pg()?;
    Ok(RedriveRun {
        id: r.try_get("id").pg()?,
        created_at: r.try_get("created_at").pg()?,
        operator: r.try_get("operator").pg()?,
        filter: r.try_get("filter").pg()?,
        total: u64::try_from(total).unwrap_or(0),
        done: u64::try_from(done).unwrap_or(0),
    })
}

pub(super) async fn create(
    pool: &PgPool,
    p: &TablePrefix,
    f: &ParkingFilter,
    limit: usize,
    operator: &str,
) -> Result<RedriveRun> {
    let f = f.for_redrive();
    let id = uuid::Uuid::now_v7().to_string();
    let filter_json = serde_json::to_string(&f).unwrap_or_default();
    let mut tx = pool.begin().await.pg()?;
    sqlx::query(&format!(
        "INSERT INTO {p}redrive_runs (id, operator, filter, total) VALUES ($1, $2, $3, 0)"
    ))
    .bind(&id)
    .bind(operator)
    .bind(&filter_json)
    .execute(&mut *tx)
    .await
    .pg()?;
    let select = format!(
        "INSERT INTO {p}redrive_items (run_id, position, consumer, message_id)
         SELECT $10, row_number() OVER (ORDER BY parked_at, consumer, message_id), consumer, message_id
         FROM (SELECT consumer, message_id, parked_at FROM {p}parked WHERE {w}
               ORDER BY parked_at, consumer, message_id LIMIT $9) AS s",
        w = filter::WHERE
    );
    let chosen = filter::bind(sqlx::query(&select), &f)
        .bind(limit_of(limit))
        .bind(&id)
        .execute(&mut *tx)
        .await
        .pg()?;
    let run = sqlx::query(&format!(
        "UPDATE {p}redrive_runs SET total = $2 WHERE id = $1 RETURNING {RUN_COLUMNS}"
    ))
    .bind(&id)
    .bind(i64::try_from(chosen.rows_affected()).unwrap_or(i64::MAX))
    .fetch_one(&mut *tx)
    .await
    .pg()?;
    let run = run_of(&run)?;
    commit(tx).await?;
    tracing::info!(run_id = %run.id, total = run.total, operator, "redrive run recorded");
    Ok(run)
}

pub(super) async fn run(
    pool: &PgPool,
    p: &TablePrefix,
    run_id: &str,
) -> Result<Option<RedriveRun>> {
    let r = sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM {p}redrive_runs WHERE id = $1"
    ))
    .bind(run_id)
    .fetch_optional(pool)
    .await
    .pg()?;
    r.as_ref().map(run_of).transpose()
}

pub(super) async fn runs(pool: &PgPool, p: &TablePrefix, limit: usize) -> Result<Vec<RedriveRun>> {
    let rows = sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM {p}redrive_runs ORDER BY created_at DESC, id DESC LIMIT $1"
    ))
    .bind(limit_of(limit))
    .fetch_all(pool)
    .await
    .pg()?;
    rows.iter().map(run_of).collect()
}

pub(super) async fn pending(
    pool: &PgPool,
    p: &TablePrefix,
    run_id: &str,
    limit: usize,
) -> Result<Vec<ParkedMessage>> {
    let cols = row::COLUMNS
        .split(", ")
        .map(|c| format!("m.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT {cols} FROM {p}redrive_items i
         JOIN {p}parked m ON m.consumer = i.consumer AND m.message_id = i.message_id
         WHERE i.run_id = $1 AND i.done_at IS NULL ORDER BY i.position LIMIT $2"
    );
    row::fetch_all(pool, sqlx::query(&sql).bind(run_id).bind(limit_of(limit))).await
}

/// Close the run's item for `m` with `outcome` and count it done, in `tx`. `false` when the
/// item was closed already (by an earlier, interrupted pass): nothing is counted twice.
async fn close_item(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    p: &TablePrefix,
    run_id: &str,
    m: &ParkedMessage,
    outcome: &str,
) -> Result<bool> {
    let first = sqlx::query(&format!(
        "UPDATE {p}redrive_items SET done_at = now(), outcome = $4
         WHERE run_id = $1 AND consumer = $2 AND message_id = $3 AND done_at IS NULL"
    ))
    .bind(run_id)
    .bind(&m.consumer)
    .bind(m.message_id.as_uuid())
    .bind(outcome)
    .execute(&mut **tx)
    .await
    .pg()?;
    if first.rows_affected() != 1 {
        return Ok(false);
    }
    sqlx::query(&format!(
        "UPDATE {p}redrive_runs SET done = done + 1 WHERE id = $1"
    ))
    .bind(run_id)
    .execute(&mut **tx)
    .await
    .pg()?;
    Ok(true)
}

pub(super) async fn mark(
    pool: &PgPool,
    p: &TablePrefix,
    run_id: &str,
    sent: &ParkedMessage,
) -> Result<bool> {
    let mut tx = pool.begin().await.pg()?;
    let mut flipped = false;
    if close_item(&mut tx, p, run_id, sent, "redriven").await? {
        // Only the parking that was read and sent back: a copy parked again since then has
        // another parked_at and a higher redrive_count, and stays parked.
        let marked = sqlx::query(&format!(
            "UPDATE {p}parked SET status = 'redriven', redrive_count = redrive_count + 1
             WHERE consumer = $1 AND message_id = $2 AND status = 'parked'
               AND parked_at = $3 AND redrive_count = $4"
        ))
        .bind(&sent.consumer)
        .bind(sent.message_id.as_uuid())
        .bind(sent.parked_at)
        .bind(i32::try_from(sent.redrive_count).unwrap_or(i32::MAX))
        .execute(&mut *tx)
        .await
        .pg()?;
        flipped = marked.rows_affected() == 1;
    }
    commit(tx).await?;
    Ok(flipped)
}

pub(super) async fn skip(
    pool: &PgPool,
    p: &TablePrefix,
    run_id: &str,
    skipped: &ParkedMessage,
    reason: &str,
) -> Result<()> {
    let mut tx = pool.begin().await.pg()?;
    close_item(&mut tx, p, run_id, skipped, reason).await?;
    commit(tx).await
}
