//! A store and the transport its messages travel on, opened together through the registry:
//! a broker when a broker URL is given, else the queue in the store's own tables.

use crate::endpoint::Endpoint;
use crate::error::OpsResult;
use crate::registry::{QueueOptions, Registry, Store, StoreOptions};
use crate::workload::{TransportSpec, Workload};
use postroom_core::{BoxSubscriber, ParkingIngest, Subscription, Transport};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What to open.
#[derive(Clone, Debug)]
pub struct PipelineSpec {
    /// The database.
    pub database: Endpoint,
    /// How to open the store.
    pub store: StoreOptions,
    /// A broker, or `None` for the queue in the store's tables.
    pub broker: Option<Endpoint>,
    /// The workload on the transport.
    pub transport: TransportSpec,
    /// The table queue's settings (without a broker).
    pub queue: QueueOptions,
}

/// An open store and transport.
#[derive(Clone)]
pub struct Pipeline {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The transport.
    pub transport: Arc<dyn Transport>,
    workload: Workload,
    consumers: Vec<String>,
    exact_figures: bool,
}

impl Pipeline {
    /// Open `spec` through `registry`.
    pub async fn open(registry: &Registry, spec: &PipelineSpec) -> OpsResult<Self> {
        let store = registry.open_store(&spec.database, &spec.store).await?;
        let (transport, exact_figures) = match &spec.broker {
            Some(broker) => {
                let mut transport = spec.transport.clone();
                if transport.last_errors.is_none() {
                    transport.last_errors = store.last_errors();
                }
                (registry.open_transport(broker, &transport).await?, false)
            }
            None => (store.queue(&spec.queue)?, true),
        };
        Ok(Self {
            store,
            transport,
            workload: spec.transport.workload.clone(),
            consumers: spec.transport.workload.consumer_names(),
            exact_figures,
        })
    }

    /// The workload it was opened for.
    #[must_use]
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The workload's consumers.
    #[must_use]
    pub fn consumers(&self) -> &[String] {
        &self.consumers
    }

    /// Whether backlog figures are exact at once (a count in the store's tables) rather than
    /// a broker's figures, which lag: quiescence must then hold a while before it counts.
    #[must_use]
    pub fn exact_figures(&self) -> bool {
        self.exact_figures
    }

    /// Bind `consumer` to `routes`, so that nothing published for it is unroutable.
    pub async fn bind(&self, consumer: &str, routes: &[&str], prefetch: usize) -> OpsResult {
        self.transport
            .bind(&Subscription::new(consumer, routes).prefetch(prefetch))
            .await?;
        Ok(())
    }

    /// Subscribe `consumer` to `routes`.
    pub async fn subscribe(
        &self,
        consumer: &str,
        routes: &[&str],
        prefetch: usize,
    ) -> OpsResult<BoxSubscriber> {
        Ok(self
            .transport
            .subscribe(&Subscription::new(consumer, routes).prefetch(prefetch))
            .await?)
    }

    /// Messages of the workload's consumers not yet settled: ready, unacked and delayed.
    pub async fn in_flight(&self) -> OpsResult<u64> {
        let mut n = 0;
        for c in &self.consumers {
            let b = self.transport.backlog(c).await?;
            n += b.ready + b.unacked + b.delayed;
        }
        Ok(n)
    }

    /// `Ok` when the store and the transport answer: the outbox can be counted and, when
    /// the workload has consumers, the first one's backlog read.
    pub async fn ready(&self) -> OpsResult {
        self.store.outbox().pending().await?;
        if let Some(first) = self.consumers.first() {
            self.transport.backlog(first).await?;
        }
        Ok(())
    }

    /// Move each consumer's dead-lettered copies into the store's parking lot until `stop`
    /// turns true (nothing to do where parking writes straight into the store).
    #[must_use]
    pub fn spawn_parking_ingest(&self, stop: &watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
        self.consumers
            .iter()
            .map(|c| {
                let ingest = ParkingIngest::new(c.clone(), self.store.parking());
                let transport = self.transport.clone();
                let rx = stop.clone();
                tokio::spawn(async move { ingest.run(transport.as_ref(), rx).await })
            })
            .collect()
    }
}
