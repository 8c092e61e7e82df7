//! The outbox store trait: rows written in the business transaction, claimed by
//! relays with leases, marked published only after the broker's confirmation.

use crate::envelope::MessageId;
use crate::error::{Error, ErrorKind, Result};
use crate::message::{Headers, OutgoingMessage, Route};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Longest error text an outbox row keeps from a failed publish.
pub const MAX_RELEASE_ERROR_CHARS: usize = 2000;

/// How an outbox row keeps its route: a kind (`topic` or `consumer`) and a name.
#[must_use]
pub fn route_parts(route: &Route) -> (&'static str, &str) {
    match route {
        Route::Topic(t) => ("topic", t.as_str()),
        Route::Consumer(c) => ("consumer", c.as_str()),
    }
}

/// The route of an outbox row from the kind and name [`route_parts`] gave; an unknown kind
/// is invalid data.
pub fn route_from_parts(kind: &str, name: String) -> Result<Route> {
    match kind {
        "topic" => Ok(Route::Topic(name)),
        "consumer" => Ok(Route::Consumer(name)),
        other => Err(Error::new(
            ErrorKind::InvalidData,
            format!("outbox route kind {other:?}"),
        )),
    }
}

/// One outbox row claimed by a relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxRecord {
    /// Stable id.
    pub id: MessageId,
    /// Destination.
    pub route: Route,
    /// Headers.
    pub headers: Headers,
    /// Body.
    pub body: Vec<u8>,
    /// Aggregate key: rows with the same key are published in insertion order.
    pub aggregate_key: String,
    /// When the row was written.
    pub created_at: DateTime<Utc>,
    /// Failed publish attempts so far.
    pub publish_attempts: u32,
}

impl OutboxRecord {
    /// The message to publish.
    #[must_use]
    pub fn to_message(&self) -> OutgoingMessage {
        OutgoingMessage {
            id: self.id,
            route: self.route.clone(),
            headers: self.headers.clone(),
            body: self.body.clone(),
        }
    }
}

/// The relay's side of an outbox.
///
/// `claim` must keep per-aggregate order across relays: it returns a row only if no earlier
/// unpublished row of the same aggregate exists, and at most one row per aggregate per call,
/// so version n+1 is never published before n is confirmed. It never returns a scheduled row
/// ([`crate::schedule`]) before its time; such a row is its own aggregate.
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Claim up to `limit` publishable rows for `lease`, for relay `relay_id`.
    async fn claim(
        &self,
        relay_id: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxRecord>>;

    /// Mark rows published (only after the broker confirmed them).
    async fn mark_published(&self, relay_id: &str, ids: &[MessageId]) -> Result<()>;

    /// Mark `published` (confirmed rows; may be empty), then claim up to `limit` rows, as
    /// one step of the relay loop. Stores may do both in one round trip and prefer the next
    /// rows of the aggregates just marked (they became heads with this mark), so that an
    /// aggregate with a backlog stays with the relay publishing it instead of every relay
    /// looking for heads among the same rows. If this fails, nothing may be assumed about the
    /// mark: the caller marks the same ids again (marking is idempotent).
    async fn mark_and_claim(
        &self,
        relay_id: &str,
        published: &[MessageId],
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxRecord>> {
        mark_then_claim(self, relay_id, published, limit, lease).await
    }

    /// Give a row back after a failed publish; it becomes claimable after `retry_after`.
    async fn release(
        &self,
        relay_id: &str,
        id: MessageId,
        error: &str,
        retry_after: Duration,
    ) -> Result<()>;

    /// Delete rows published more than `older_than` ago (retention). Returns how many.
    async fn purge_published(&self, older_than: Duration) -> Result<u64>;

    /// Rows not yet published.
    async fn pending(&self) -> Result<u64>;

    /// Wait until rows may have become claimable for `relay_id` since its last claim began
    /// (new rows, published rows whose successors are now heads, a scheduled row that fell
    /// due), or `max_wait` passes. A store with scheduled rows ends the wait no later than the
    /// next one falls due.
    async fn wait_for_rows(&self, relay_id: &str, max_wait: Duration) {
        let _ = relay_id;
        tokio::time::sleep(max_wait).await;
    }
}

/// [`OutboxStore::mark_and_claim`] as two calls: mark `published` (if any), then claim. The
/// default for stores that have nothing better, and the fallback of those that do.
pub async fn mark_then_claim<S: OutboxStore + ?Sized>(
    store: &S,
    relay_id: &str,
    published: &[MessageId],
    limit: usize,
    lease: Duration,
) -> Result<Vec<OutboxRecord>> {
    if !published.is_empty() {
        store.mark_published(relay_id, published).await?;
    }
    store.claim(relay_id, limit, lease).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_reads_back_from_its_parts() {
        for route in [Route::Topic("a.b".into()), Route::Consumer("c".into())] {
            let (kind, name) = route_parts(&route);
            assert_eq!(route_from_parts(kind, name.to_string()).unwrap(), route);
        }
        let e = route_from_parts("queue", "q".into()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData);
    }
}
