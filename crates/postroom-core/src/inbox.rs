//! The inbox as the rest of postroom sees it: whether a consumer has already applied a
//! message (each store keeps its inbox in its own tables), and how long inbox rows are kept.
//! Redrive asks before it sends a parked message back, so that a message whose effect
//! committed (a commit whose outcome looked unknown, then parked) is not applied twice.

use crate::envelope::MessageId;
use crate::error::Result;
use async_trait::async_trait;
use std::time::Duration;

/// How long inbox rows are kept by default: 14 days. A copy older than this may find its
/// inbox row purged and be applied again, so redrive refuses such messages unless forced.
pub const DEFAULT_REPLAY_WINDOW: Duration = Duration::from_secs(14 * 24 * 3600);

/// Looks up a consumer's inbox.
#[async_trait]
pub trait InboxLookup: Send + Sync {
    /// Whether `consumer` has applied `id` (its inbox holds the id).
    async fn contains(&self, consumer: &str, id: MessageId) -> Result<bool>;

    /// How many messages `consumer`'s inbox holds: the ids it has applied and not yet purged.
    async fn count(&self, consumer: &str) -> Result<u64>;

    /// For each `(consumer, id)` of `items`, in order, whether that consumer has applied the
    /// id. Stores answer many at once (a dry run of redrive asks about every message it
    /// selects, up to hundreds of thousands); this default asks one at a time.
    async fn contains_each(&self, items: &[(&str, MessageId)]) -> Result<Vec<bool>> {
        let mut held = Vec::with_capacity(items.len());
        for (consumer, id) in items {
            held.push(self.contains(consumer, *id).await?);
        }
        Ok(held)
    }
}

/// How many `(consumer, id)` pairs a store asks about in one statement in
/// [`InboxLookup::contains_each`]: large enough that a big dry run makes few round trips,
/// small enough that one statement's parameters stay small.
pub const LOOKUP_CHUNK: usize = 1_000;

/// The ids of a batch claim that were new (`is_new` says which), in the order given and each
/// once however often it repeats in `ids`.
pub fn new_in_order(ids: &[MessageId], is_new: impl Fn(&MessageId) -> bool) -> Vec<MessageId> {
    let mut seen = std::collections::HashSet::new();
    ids.iter()
        .filter(|id| is_new(id) && seen.insert(**id))
        .copied()
        .collect()
}

/// Compile-time check that [`InboxLookup`] stays object safe.
#[allow(dead_code)]
fn _inbox_lookup_is_object_safe(_: &dyn InboxLookup) {}
