//! Sending right after the commit, without waiting for a relay.
//!
//! A producer that wants its messages on the broker at once writes them with
//! [`enqueue_to_send`]: the rows are written as by [`enqueue_batch`](super::enqueue_batch),
//! and those that are their aggregate's earliest unpublished row are leased to the producer
//! in the same transaction (the others wait behind their predecessors, for the relay). After
//! the commit, [`OutboxSender::send`](postroom_core::relay::OutboxSender::send) publishes the leased rows with confirms and marks them
//! published, like a relay would. Nothing is lost on the way: a producer that dies or gives up
//! between its commit and the mark leaves its rows to the relay when the lease runs out, and a
//! publish that failed is given back at once; either way the message goes out again with the
//! same id, and the consumers' inbox absorbs a copy.
//!
//! Order holds as it does between relays: a leased row's successors are not claimable until
//! it is published, and the lease is taken under the aggregate's advisory lock, after every
//! earlier row of the aggregate committed.

use super::insert_batch;
use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::relay::ToSend;
use postroom_core::{OutgoingMessage, Result};
use sqlx::PgConnection;
use std::collections::HashSet;
use std::time::Duration;

/// Write `msgs` (each ordered under its [`OutgoingMessage::aggregate_key`]) into the outbox in the caller's transaction
/// (pass `&mut *tx`), and lease to `owner` for `lease` those that are their aggregate's
/// earliest unpublished row. Send them with [`OutboxSender::send`](postroom_core::relay::OutboxSender::send) after the commit.
pub async fn enqueue_to_send(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    msgs: &[OutgoingMessage],
    owner: &str,
    lease: Duration,
) -> Result<ToSend> {
    // The insert wakes no relay: the rows leased below are the producer's to send.
    insert_batch(&mut *conn, prefix, msgs, true).await?;
    if msgs.is_empty() {
        return Ok(ToSend::new(owner, Vec::new()));
    }
    // A statement of its own, so that its snapshot sees every row of these aggregates that
    // committed before the insert above took their advisory locks. It ends the quiet insert
    // (later inserts of the transaction wake the relays again), and wakes the relays if it
    // leaves them rows (waiting behind a predecessor: the predecessor's mark may come before
    // this transaction commits, and would then find no successor to announce).
    let sql = format!(
        "WITH u AS (
            UPDATE {p}outbox o SET locked_by = $2, locked_until = now() + make_interval(secs => $3)
            WHERE o.id = ANY($1) AND o.published_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM {p}outbox e
                              WHERE e.aggregate_key = o.aggregate_key AND e.published_at IS NULL
                                AND e.seq < o.seq)
            RETURNING o.id),
         r AS (SELECT set_config('postroom.outbox_quiet', '', true) AS reset),
         n AS (SELECT count(pg_notify(current_schema() || '.' || $4, '')) AS notified
               FROM (SELECT 1 WHERE (SELECT count(*) FROM u) < cardinality($1)) AS left_over)
         SELECT u.id, d.done FROM (SELECT (SELECT count(*) FROM r) + (SELECT notified FROM n) AS done) AS d
         LEFT JOIN u ON true",
        p = prefix
    );
    let ids: Vec<uuid::Uuid> = msgs.iter().map(|m| m.id.as_uuid()).collect();
    // `done` is returned so that the statement computes it (the reset and the notification).
    let leased: HashSet<uuid::Uuid> = sqlx::query_as::<_, (Option<uuid::Uuid>, i64)>(&sql)
        .bind(ids)
        .bind(owner)
        .bind(lease.as_secs_f64())
        .bind(prefix.outbox_channel())
        .fetch_all(conn)
        .await
        .pg()?
        .into_iter()
        .filter_map(|(id, _done)| id)
        .collect();
    let messages = msgs
        .iter()
        .filter(|m| leased.contains(&m.id.as_uuid()))
        .cloned()
        .collect();
    Ok(ToSend::new(owner, messages))
}
