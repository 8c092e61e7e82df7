//! Parked messages to and from rows of `{prefix}parked`.

use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::{
    Error, ErrorClass, ErrorKind, Headers, MessageId, ParkedMessage, ParkedStatus, Result,
};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, Row};

/// The columns of `{prefix}parked`, in the order [`from_row`] reads and [`insert`] binds.
pub(crate) const COLUMNS: &str = "consumer, message_id, consumer_version, message_type, schema_version, attempts, \
    first_failure_at, parked_at, error_class, error_code, error_message, correlation_id, traceparent, routing_key, \
    producer, headers, body, status, redrive_count";

/// The parked messages that `q` (a statement selecting [`COLUMNS`]) reads from `pool`.
pub(crate) async fn fetch_all(
    pool: &PgPool,
    q: Query<'_, Postgres, PgArguments>,
) -> Result<Vec<ParkedMessage>> {
    let rows = q.fetch_all(pool).await.pg()?;
    rows.iter().map(from_row).collect()
}

fn to_i32(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn to_u32(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// Store `m` through `conn` (a pool connection or the caller's transaction). Parking the same
/// `(consumer, message_id)` again replaces the diagnostics and sets the status back to parked.
pub(crate) async fn insert(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    m: &ParkedMessage,
) -> Result<()> {
    let sql = format!(
        "INSERT INTO {p}parked ({COLUMNS})
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, 'parked', $18)
         ON CONFLICT (consumer, message_id) DO UPDATE SET
            consumer_version = EXCLUDED.consumer_version, message_type = EXCLUDED.message_type,
            schema_version = EXCLUDED.schema_version, attempts = EXCLUDED.attempts,
            first_failure_at = EXCLUDED.first_failure_at, parked_at = EXCLUDED.parked_at,
            error_class = EXCLUDED.error_class, error_code = EXCLUDED.error_code,
            error_message = EXCLUDED.error_message, correlation_id = EXCLUDED.correlation_id,
            traceparent = EXCLUDED.traceparent, routing_key = EXCLUDED.routing_key,
            producer = EXCLUDED.producer, headers = EXCLUDED.headers, body = EXCLUDED.body,
            status = 'parked', redrive_count = EXCLUDED.redrive_count",
        p = prefix
    );
    sqlx::query(&sql)
        .bind(&m.consumer)
        .bind(m.message_id.as_uuid())
        .bind(&m.consumer_version)
        .bind(&m.message_type)
        .bind(m.schema_version.map(to_i32))
        .bind(to_i32(m.attempts))
        .bind(m.first_failure_at)
        .bind(m.parked_at)
        .bind(m.error_class.as_str())
        .bind(&m.error_code)
        .bind(postroom_core::message::truncate(
            &m.error_message,
            postroom_core::parking::MAX_ERROR_CHARS,
        ))
        .bind(&m.correlation_id)
        .bind(&m.traceparent)
        .bind(&m.routing_key)
        .bind(&m.producer)
        .bind(Json(&m.headers))
        .bind(&m.body)
        .bind(to_i32(m.redrive_count))
        .execute(conn)
        .await
        .pg()?;
    Ok(())
}

/// A parked message from a row selected with [`COLUMNS`].
pub(crate) fn from_row(row: &PgRow) -> Result<ParkedMessage> {
    let class: String = row.try_get("error_class").pg()?;
    let error_class: ErrorClass = class
        .parse()
        .map_err(|e: String| Error::new(ErrorKind::InvalidData, e))?;
    let status: String = row.try_get("status").pg()?;
    let status: ParkedStatus = status
        .parse()
        .map_err(|e: String| Error::new(ErrorKind::InvalidData, e))?;
    let headers: Json<Headers> = row.try_get("headers").pg()?;
    let id: uuid::Uuid = row.try_get("message_id").pg()?;
    let schema_version: Option<i32> = row.try_get("schema_version").pg()?;
    Ok(ParkedMessage {
        message_id: MessageId::from(id),
        consumer: row.try_get("consumer").pg()?,
        consumer_version: row.try_get("consumer_version").pg()?,
        message_type: row.try_get("message_type").pg()?,
        schema_version: schema_version.map(to_u32),
        attempts: to_u32(row.try_get("attempts").pg()?),
        first_failure_at: row.try_get("first_failure_at").pg()?,
        parked_at: row.try_get("parked_at").pg()?,
        error_class,
        error_code: row.try_get("error_code").pg()?,
        error_message: row.try_get("error_message").pg()?,
        correlation_id: row.try_get("correlation_id").pg()?,
        traceparent: row.try_get("traceparent").pg()?,
        routing_key: row.try_get("routing_key").pg()?,
        producer: row.try_get("producer").pg()?,
        headers: headers.0,
        body: row.try_get("body").pg()?,
        status,
        redrive_count: to_u32(row.try_get("redrive_count").pg()?),
    })
}
