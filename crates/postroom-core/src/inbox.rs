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
}

/// Compile-time check that [`InboxLookup`] stays object safe.
#[allow(dead_code)]
fn _inbox_lookup_is_object_safe(_: &dyn InboxLookup) {}
