//! Scheduled sends ([`postroom_core::schedule`]): rows that no relay claims before their
//! `not_before`, written and cancelled in the caller's transaction.
//!
//! A scheduled row is ordered under its own id, so it takes no aggregate's commit-order lock,
//! neither waits behind its aggregate's earlier rows nor holds back its later ones, and is never
//! leased to a producer that sends its own rows ([`super::enqueue_to_send`]): it is the relays'
//! (and, under the WAL relay, its timer's) to publish once it falls due.

use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::outbox::route_parts;
use postroom_core::{MessageId, NotBefore, Result, ScheduledMessage};
use sqlx::PgConnection;
use sqlx::types::Json;

/// Write `message` into the outbox in the caller's transaction (pass `&mut *tx`), to be
/// published not before its time. A delay ([`NotBefore::After`]) counts from the moment the row
/// is written, by the database server's clock. [`cancel`] removes it until a relay takes it.
pub async fn schedule(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    message: &ScheduledMessage,
) -> Result<()> {
    let m = &message.message;
    let (kind, route) = route_parts(&m.route);
    let (at, delay) = match message.not_before {
        NotBefore::At(at) => (Some(at), None),
        NotBefore::After(d) => (None, Some(d.as_secs_f64())),
    };
    let sql = format!(
        "INSERT INTO {prefix}outbox (id, aggregate_key, route_kind, route, headers, body, not_before, available_at)
         SELECT $1, $2, $3, $4, $5, $6, t, t
         FROM (SELECT coalesce($7::timestamptz, clock_timestamp() + make_interval(secs => $8::float8)) AS t) AS due"
    );
    sqlx::query(&sql)
        .bind(m.id.as_uuid())
        .bind(message.ordering_key())
        .bind(kind)
        .bind(route)
        .bind(Json(&m.headers))
        .bind(&m.body)
        .bind(at)
        .bind(delay)
        .execute(conn)
        .await
        .pg()?;
    Ok(())
}

/// Remove the scheduled row `id` in the caller's transaction, if no relay has taken it: true if
/// it was removed (it will not be published), false if it was published, is being published (a
/// relay holds its lease), is not a scheduled row, or is unknown. A relay claiming the row at
/// the same moment is waited for, and then wins.
///
/// A relay that published the row and died before marking it leaves the row looking unsent
/// once its lease has run out: a cancel then removes it and says true, though the broker has
/// the message (as at-least-once delivery allows a copy, the consumers' inbox sees it once).
pub async fn cancel(conn: &mut PgConnection, prefix: &TablePrefix, id: MessageId) -> Result<bool> {
    let sql = format!(
        "DELETE FROM {prefix}outbox
         WHERE id = $1 AND published_at IS NULL AND not_before IS NOT NULL
           AND (locked_until IS NULL OR locked_until < now())"
    );
    let done = sqlx::query(&sql)
        .bind(id.as_uuid())
        .execute(conn)
        .await
        .pg()?;
    Ok(done.rows_affected() > 0)
}
