//! Sending right after the commit, without waiting for a relay.
//!
//! A producer that wants its messages on the broker at once writes them with
//! [`enqueue_to_send`]: the rows are written as by [`enqueue_batch`](super::enqueue_batch),
//! and those that are their aggregate's earliest unpublished row are leased to the producer
//! in the same transaction (the others wait behind their predecessors, for the relay). After
//! the commit, [`OutboxSender::send`] publishes the leased rows with confirms and marks them
//! published, like a relay would. Nothing is lost on the way: a producer that dies or gives up
//! between its commit and the mark leaves its rows to the relay when the lease runs out, and a
//! publish that failed is given back at once; either way the message goes out again with the
//! same id, and the consumers' inbox absorbs a copy.
//!
//! Order holds as it does between relays: a leased row's successors are not claimable until
//! it is published, and the lease is taken under the aggregate's advisory lock, after every
//! earlier row of the aggregate committed.

use super::enqueue_batch;
use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::{MessageId, OutboxStore, OutgoingMessage, Publisher, Result};
use sqlx::PgConnection;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The rows a producer's transaction leased to itself, to send once it has committed.
#[derive(Clone, Debug)]
#[must_use = "send the rows after the commit, or the relay sends them once the lease runs out"]
pub struct ToSend {
    owner: String,
    messages: Vec<OutgoingMessage>,
}

impl ToSend {
    /// The leased messages, in the order they were written.
    pub fn messages(&self) -> &[OutgoingMessage] {
        &self.messages
    }

    /// How many rows were leased.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether no row was leased (each waits behind an earlier row of its aggregate).
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

/// Write `msgs` (each with its aggregate key) into the outbox in the caller's transaction
/// (pass `&mut *tx`), and lease to `owner` for `lease` those that are their aggregate's
/// earliest unpublished row. Send them with [`OutboxSender::send`] after the commit.
pub async fn enqueue_to_send(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    msgs: &[(OutgoingMessage, String)],
    owner: &str,
    lease: Duration,
) -> Result<ToSend> {
    enqueue_batch(&mut *conn, prefix, msgs).await?;
    if msgs.is_empty() {
        return Ok(ToSend {
            owner: owner.to_owned(),
            messages: Vec::new(),
        });
    }
    // A statement of its own, so that its snapshot sees every row of these aggregates that
    // committed before the insert above took their advisory locks.
    let sql = format!(
        "UPDATE {p}outbox o SET locked_by = $2, locked_until = now() + make_interval(secs => $3)
         WHERE o.id = ANY($1) AND o.published_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM {p}outbox e
                           WHERE e.aggregate_key = o.aggregate_key AND e.published_at IS NULL
                             AND e.seq < o.seq)
         RETURNING o.id",
        p = prefix
    );
    let ids: Vec<uuid::Uuid> = msgs.iter().map(|(m, _)| m.id.as_uuid()).collect();
    let leased: HashSet<uuid::Uuid> = sqlx::query_scalar(&sql)
        .bind(ids)
        .bind(owner)
        .bind(lease.as_secs_f64())
        .fetch_all(conn)
        .await
        .pg()?
        .into_iter()
        .collect();
    Ok(ToSend {
        owner: owner.to_owned(),
        messages: msgs
            .iter()
            .filter(|(m, _)| leased.contains(&m.id.as_uuid()))
            .map(|(m, _)| m.clone())
            .collect(),
    })
}

/// What one [`OutboxSender::send`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Confirmed by the broker and marked published.
    pub published: usize,
    /// Not confirmed: given back to the relay.
    pub given_back: usize,
}

/// Publishes what producers leased to themselves, after their commit.
pub struct OutboxSender<P: ?Sized> {
    outbox: super::PgOutbox,
    publisher: Arc<P>,
    retry_after: Duration,
}

impl<P: Publisher + ?Sized> OutboxSender<P> {
    /// A sender marking in `outbox` what `publisher` confirmed.
    pub fn new(outbox: super::PgOutbox, publisher: Arc<P>) -> Self {
        Self {
            outbox,
            publisher,
            retry_after: Duration::from_secs(1),
        }
    }

    /// Publish `rows` with confirms and mark the confirmed ones published; give the others
    /// back to the relay (tried again after a second). An error (the mark failed) leaves the
    /// confirmed rows leased: the relay publishes them again once the lease runs out.
    pub async fn send(&self, rows: ToSend) -> Result<Sent> {
        if rows.is_empty() {
            return Ok(Sent::default());
        }
        // One message goes alone, so that producers sending at once share the publisher's
        // confirm round trips (a transport groups single publishes) instead of queueing
        // behind each other's batches.
        let results = match rows.messages.as_slice() {
            [one] => vec![self.publisher.publish(one).await],
            many => self.publisher.publish_batch(many).await,
        };
        let mut ok: Vec<MessageId> = Vec::with_capacity(rows.len());
        let mut given_back = 0;
        for (m, result) in rows.messages.iter().zip(results) {
            match result {
                Ok(()) => ok.push(m.id),
                Err(e) => {
                    tracing::warn!(message_id = %m.id, error = %e, "publish after commit failed; row given back to the relay");
                    given_back += 1;
                    self.outbox
                        .release(&rows.owner, m.id, &e.to_string(), self.retry_after)
                        .await?;
                }
            }
        }
        if !ok.is_empty() {
            self.outbox.mark_published(&rows.owner, &ok).await?;
        }
        Ok(Sent {
            published: ok.len(),
            given_back,
        })
    }
}
