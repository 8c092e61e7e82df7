//! An open store and the transport its messages travel on, as a started service holds them:
//! what the operator tools and the demo read figures from (the transport's backlog, the
//! outbox's pending rows, readiness) while the service runs.

use postroom_core::driver::{Store, Workload};
use postroom_core::{BoxSubscriber, Result, Subscription, Transport};
use std::sync::Arc;

/// A store and its transport, opened together by [`Service::start`](crate::Service::start).
/// Cheap to clone: every part is shared.
#[derive(Clone)]
pub struct Stack {
    store: Option<Arc<dyn Store>>,
    transport: Arc<dyn Transport>,
    workload: Workload,
    exact_figures: bool,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("store", &self.store.as_ref().map(|s| s.location()))
            .field("transport", &self.transport.name())
            .field("consumers", &self.workload.consumer_names())
            .finish()
    }
}

impl Stack {
    pub(crate) fn new(
        store: Option<Arc<dyn Store>>,
        transport: Arc<dyn Transport>,
        workload: Workload,
        exact_figures: bool,
    ) -> Self {
        Self {
            store,
            transport,
            workload,
            exact_figures,
        }
    }

    /// The store opened from the database URL, when there is one.
    #[must_use]
    pub fn store(&self) -> Option<&Arc<dyn Store>> {
        self.store.as_ref()
    }

    /// The transport.
    #[must_use]
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// The workload the transport was opened for: the prefix, the ladder, every consumer the
    /// service knows (its own and those bound for other processes) with their routes.
    #[must_use]
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The names of the workload's consumers.
    #[must_use]
    pub fn consumers(&self) -> Vec<String> {
        self.workload.consumer_names()
    }

    /// Whether backlog figures are exact at once (a count in the store's tables) rather than
    /// a broker's figures, which lag: quiescence must then hold a while before it counts.
    #[must_use]
    pub fn exact_figures(&self) -> bool {
        self.exact_figures
    }

    /// Bind `consumer` to `routes`, so that nothing published for it is unroutable.
    pub async fn bind(&self, consumer: &str, routes: &[&str], prefetch: usize) -> Result {
        self.transport
            .bind(&Subscription::new(consumer, routes).prefetch(prefetch))
            .await
    }

    /// Subscribe `consumer` to `routes`.
    pub async fn subscribe(
        &self,
        consumer: &str,
        routes: &[&str],
        prefetch: usize,
    ) -> Result<BoxSubscriber> {
        self.transport
            .subscribe(&Subscription::new(consumer, routes).prefetch(prefetch))
            .await
    }

    /// Messages of the workload's consumers not yet settled: ready, unacked and delayed.
    pub async fn in_flight(&self) -> Result<u64> {
        let mut n = 0;
        for c in &self.workload.consumers {
            let b = self.transport.backlog(&c.name).await?;
            n += b.ready + b.unacked + b.delayed;
        }
        Ok(n)
    }

    /// Outbox rows not yet published (`None` without a store).
    pub async fn outbox_pending(&self) -> Result<Option<u64>> {
        match &self.store {
            Some(s) => Ok(Some(s.outbox().pending().await?)),
            None => Ok(None),
        }
    }

    /// How many messages consumer `consumer`'s inbox holds (the ids it applied and not yet
    /// purged); `None` without a store, or with one that keeps no inbox.
    pub async fn inbox_count(&self, consumer: &str) -> Result<Option<u64>> {
        match self.store.as_ref().and_then(|s| s.inbox()) {
            Some(inbox) => Ok(Some(inbox.count(consumer).await?)),
            None => Ok(None),
        }
    }

    /// `Ok` when the store and the transport answer: the outbox can be counted and, when
    /// the workload has consumers, the first one's backlog read.
    pub async fn ready(&self) -> Result {
        self.outbox_pending().await?;
        if let Some(first) = self.workload.consumers.first() {
            self.transport.backlog(&first.name).await?;
        }
        Ok(())
    }
}
