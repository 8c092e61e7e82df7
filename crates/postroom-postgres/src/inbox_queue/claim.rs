//! The SQL of the inbox queue: claiming rows under a lease (the earliest pending row of each
//! ordered key only) and settling them. Every settle checks that the worker still holds the
//! row.

use super::InboxQueue;
use crate::error::{SqlxResultExt, commit};
use crate::lease;
use crate::parking::row;
use postroom_core::message::headers as h;
use postroom_core::{Headers, ParkedMessage, ReceivedMessage, Result};
use sqlx::Row;
use sqlx::types::Json;
use std::time::Duration;

/// A claimed row.
pub(super) struct Claimed {
    pub id: i64,
    pub message: ReceivedMessage,
    pub attempts: u32,
    pub order: Option<(String, u64)>,
    pub last_seq: Option<u64>,
    pub gap_for: Option<Duration>,
}

impl InboxQueue {
    pub(super) async fn claim(&self, worker: &str) -> Result<Vec<Claimed>> {
        let sql = format!(
            "WITH c AS (
                SELECT q.id FROM {p}inbox_queue q
                WHERE q.consumer = $1 AND q.status = 'pending' AND q.available_at <= now()
                  AND (q.locked_until IS NULL OR q.locked_until < now())
                  AND (q.order_key IS NULL OR NOT EXISTS (
                        SELECT 1 FROM {p}inbox_queue e
                        WHERE e.consumer = q.consumer AND e.order_key = q.order_key AND e.status = 'pending'
                          AND (e.order_seq, e.id) < (q.order_seq, q.id)))
                ORDER BY q.id LIMIT $2 FOR UPDATE SKIP LOCKED)
             UPDATE {p}inbox_queue q SET locked_by = $3, locked_until = now() + make_interval(secs => $4)
             FROM c WHERE q.id = c.id
             RETURNING q.id, q.message_id, q.routing_key, q.headers, q.body, q.attempts, q.order_key, q.order_seq,
                 EXTRACT(EPOCH FROM now() - q.gap_since)::float8 AS gap_for,
                 (SELECT k.last_seq FROM {p}inbox_queue_keys k WHERE k.consumer = q.consumer AND k.order_key = q.order_key) AS last_seq",
            p = self.prefix
        );
        let rows = lease::claim_rows(
            &self.pool,
            &sql,
            &self.config.consumer.name,
            i64::try_from(self.config.batch).unwrap_or(1),
            worker,
            self.config.lease,
        )
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let attempts = u32::try_from(r.try_get::<i32, _>("attempts").pg()?).unwrap_or(0);
            let mut headers: Headers = r.try_get::<Json<Headers>, _>("headers").pg()?.0;
            headers.insert(h::RETRY_ATTEMPT.into(), attempts.to_string());
            let key: Option<String> = r.try_get("order_key").pg()?;
            let seq: Option<i64> = r.try_get("order_seq").pg()?;
            let last: Option<i64> = r.try_get("last_seq").pg()?;
            let gap: Option<f64> = r.try_get("gap_for").pg()?;
            out.push(Claimed {
                id: r.try_get("id").pg()?,
                message: lease::received(&r, headers)?.redelivered(attempts > 0),
                attempts,
                order: key.zip(seq.and_then(|s| u64::try_from(s).ok())),
                last_seq: last.and_then(|s| u64::try_from(s).ok()),
                gap_for: gap.map(crate::seconds),
            });
        }
        out.sort_by_key(|c| c.id);
        Ok(out)
    }

    /// Done; in ordered mode the key's last applied sequence moves to this row's.
    pub(super) async fn mark_done(&self, worker: &str, c: &Claimed) -> Result<bool> {
        let p = &self.prefix;
        let mut tx = self.pool.begin().await.pg()?;
        let done = sqlx::query(&format!(
            "UPDATE {p}inbox_queue SET status = 'done', done_at = now(), locked_by = NULL, locked_until = NULL
             WHERE id = $1 AND locked_by = $2 AND status = 'pending'"
        ))
        .bind(c.id)
        .bind(worker)
        .execute(&mut *tx)
        .await
        .pg()?;
        if let (Some((key, seq)), 1) = (&c.order, done.rows_affected()) {
            sqlx::query(&format!(
                "INSERT INTO {p}inbox_queue_keys (consumer, order_key, last_seq) VALUES ($1, $2, $3)
                 ON CONFLICT (consumer, order_key) DO UPDATE SET last_seq = GREATEST({p}inbox_queue_keys.last_seq, EXCLUDED.last_seq)"
            ))
            .bind(&self.config.consumer.name)
            .bind(key)
            .bind(i64::try_from(*seq).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await
            .pg()?;
        }
        commit(tx).await?;
        Ok(done.rows_affected() == 1)
    }

    /// Back to pending after `delay`. `attempts` and `error` are recorded when the delay is a
    /// retry; a wait behind a gap passes `None` and only starts the gap clock.
    pub(super) async fn defer(
        &self,
        worker: &str,
        c: &Claimed,
        delay: Duration,
        retry: Option<(u32, &Headers, &str)>,
    ) -> Result<bool> {
        let p = &self.prefix;
        let done = match retry {
            Some((attempts, headers, error)) => sqlx::query(&format!(
                "UPDATE {p}inbox_queue SET attempts = $3, headers = $4, last_error = $5, gap_since = NULL,
                     available_at = now() + make_interval(secs => $6), locked_by = NULL, locked_until = NULL
                 WHERE id = $1 AND locked_by = $2 AND status = 'pending'"
            ))
            .bind(c.id)
            .bind(worker)
            .bind(i32::try_from(attempts).unwrap_or(i32::MAX))
            .bind(Json(headers))
            .bind(error)
            .bind(delay.as_secs_f64())
            .execute(&self.pool)
            .await,
            None => sqlx::query(&format!(
                "UPDATE {p}inbox_queue SET gap_since = COALESCE(gap_since, now()),
                     available_at = now() + make_interval(secs => $3), locked_by = NULL, locked_until = NULL
                 WHERE id = $1 AND locked_by = $2 AND status = 'pending'"
            ))
            .bind(c.id)
            .bind(worker)
            .bind(delay.as_secs_f64())
            .execute(&self.pool)
            .await,
        };
        Ok(done.pg()?.rows_affected() == 1)
    }

    /// Parked: the parking record and the row's status change in one transaction.
    pub(super) async fn park(
        &self,
        worker: &str,
        c: &Claimed,
        record: &ParkedMessage,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await.pg()?;
        let moved = sqlx::query(&format!(
            "UPDATE {p}inbox_queue SET status = 'parked', last_error = $3, locked_by = NULL, locked_until = NULL
             WHERE id = $1 AND locked_by = $2 AND status = 'pending'",
            p = self.prefix
        ))
        .bind(c.id)
        .bind(worker)
        .bind(format!("{} {}: {}", record.error_class, record.error_code, record.error_message))
        .execute(&mut *tx)
        .await
        .pg()?;
        if moved.rows_affected() != 1 {
            return Ok(false);
        }
        row::insert(&mut tx, &self.prefix, record).await?;
        commit(tx).await?;
        Ok(true)
    }
}
