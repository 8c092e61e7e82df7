//! A real subscriber, watched: how many receives started, and how many were dropped before
//! they returned (a loop that cancels a receive halfway could lose what the receive held).

use postroom_core::{Result, Subscriber, async_trait};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Counts receives started, finished, and dropped before they finished.
#[derive(Debug, Default)]
pub struct Receives {
    /// Receives started.
    pub started: AtomicUsize,
    /// Receives dropped before they returned.
    pub cancelled: AtomicUsize,
}

/// A real subscriber, watched: a receive future dropped before it returned is counted.
pub struct Watched<S> {
    /// The subscriber watched.
    pub inner: S,
    /// Its counts.
    pub receives: Arc<Receives>,
}

struct Unfinished(Option<Arc<Receives>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl<S: Subscriber> Subscriber for Watched<S> {
    type Delivery = S::Delivery;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<S::Delivery>> {
        self.receives.started.fetch_add(1, Ordering::SeqCst);
        let mut guard = Unfinished(Some(self.receives.clone()));
        let r = self.inner.next(max_wait).await;
        guard.0 = None;
        r
    }

    async fn close(&mut self) {
        self.inner.close().await;
    }
}
