//! A store that is also its own transport: the table queue in the store's database, for the
//! cases only a table queue has (a lease another process can outlive, a redrive racing the
//! consumer on the same database) in [`crate::cases::table_queue_redrive`] and
//! [`crate::cases::crash_loop`].

use crate::fixture::StoreFixture;
use postroom_core::{InboxLookup, Transport};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A store half whose database also holds a queue.
pub trait TableQueueFixture: StoreFixture {
    /// Where another process finds this store (a database URL, a file path).
    fn address(&self) -> String;

    /// The store's queue with this `lease` and `poll_interval`.
    fn queue(&self, lease: Duration, poll_interval: Duration) -> Arc<dyn Transport>;

    /// The queue of the store at `address` (see [`TableQueueFixture::address`]), opened
    /// afresh as another process would (not required to be `Send`: a consumer process
    /// awaits it on its own).
    fn queue_at(
        address: &str,
        lease: Duration,
        poll_interval: Duration,
    ) -> impl Future<Output = Arc<dyn Transport>>
    where
        Self: Sized;

    /// The inbox a redrive asks whether a consumer applied a message already.
    fn inbox(&self) -> Arc<dyn InboxLookup>;
}
