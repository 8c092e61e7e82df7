//! Claiming rows under a lease, as the table queue and the inbox queue do: the parameters
//! their claim statements take, and the message a claimed row holds.

use crate::error::SqlxResultExt;
use postroom_core::{Headers, MessageId, ReceivedMessage, Result};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use std::time::Duration;

/// The rows the claim statement `sql` leases on `pool`. Its parameters are the consumer
/// (`$1`), how many rows at most (`$2`), who takes the lease (`$3`) and how long the lease
/// lasts, in seconds (`$4`).
pub(crate) async fn claim_rows(
    pool: &PgPool,
    sql: &str,
    consumer: &str,
    limit: i64,
    holder: &str,
    lease: Duration,
) -> Result<Vec<PgRow>> {
    sqlx::query(sql)
        .bind(consumer)
        .bind(limit)
        .bind(holder)
        .bind(lease.as_secs_f64())
        .fetch_all(pool)
        .await
        .pg()
}

/// The message a claimed row holds (its `message_id`, `routing_key` and `body` columns),
/// with `headers`: the caller reads them from the row and may add its own.
pub(crate) fn received(r: &PgRow, headers: Headers) -> Result<ReceivedMessage> {
    let id: uuid::Uuid = r.try_get("message_id").pg()?;
    Ok(ReceivedMessage::new(
        Some(MessageId::from(id)),
        r.try_get::<String, _>("routing_key").pg()?,
        headers,
        r.try_get("body").pg()?,
    ))
}
