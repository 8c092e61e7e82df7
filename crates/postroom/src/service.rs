//! An opened service: its store, the consumers and the relay it will run. [`Service::start`]
//! connects the broker with the workload derived from the declared retry ladder and the
//! consumers, checks every consumer against what the transport can keep, attaches them, and
//! returns only then.

use crate::builder::ServiceBuilder;
use crate::consumer::ConsumerSpec;
use crate::error::from_ops;
use crate::running::{Running, RunningConsumer};
use postroom_core::parking::ParkingIngest;
use postroom_core::{
    Consumer, Error, ErrorKind, OutboxRelay, OutboxStore, ParkingStore, RelayConfig, Result,
    RetryPolicy, Subscription, Transport,
};
use postroom_ops::registry::{Registry, Store};
use postroom_ops::{Endpoint, TransportSpec, Workload};
use std::sync::Arc;
use tokio::sync::watch;

/// What a transport driver without a topology to apply says (its consumers' queues are
/// made when they bind).
const NO_TOPOLOGY: &str = "has no topology to plan";

/// Where the transport comes from.
pub(crate) enum TransportSource {
    /// Opened by the program.
    Given(Arc<dyn Transport>),
    /// Opened by the service (the queue in the database's tables).
    Opened(Arc<dyn Transport>),
    /// A broker to connect at start.
    Broker(Endpoint),
}

pub(crate) struct Parts {
    pub registry: Registry,
    pub store: Option<Arc<dyn Store>>,
    pub outbox: Option<Arc<dyn OutboxStore>>,
    pub parking: Option<Arc<dyn ParkingStore>>,
    pub transport: TransportSource,
    pub prefix: String,
    pub retry: RetryPolicy,
}

/// A service, opened and not yet started: add its consumers and its relay, then
/// [`start`](Service::start) it.
#[must_use]
pub struct Service {
    parts: Parts,
    consumers: Vec<ConsumerSpec>,
    elsewhere: Vec<(String, Vec<String>)>,
    relay: Option<RelayConfig>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("prefix", &self.parts.prefix)
            .field("consumers", &self.consumers)
            .field("relay", &self.relay.is_some())
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Declare a service: where its store and transport are, and its retry policy.
    pub fn builder() -> ServiceBuilder {
        ServiceBuilder::default()
    }

    pub(crate) fn new(parts: Parts) -> Self {
        Self {
            parts,
            consumers: Vec::new(),
            elsewhere: Vec::new(),
            relay: None,
        }
    }

    /// The store the service opened from its database URL, as its concrete type
    /// (`postroom::sqlite::SqliteStore`, `postroom::postgres::PgStore`), for the
    /// application's own tables and its handlers; `None` for another type or when the store
    /// was given as opened objects.
    #[must_use]
    pub fn store<T: 'static>(&self) -> Option<&T> {
        self.parts.store.as_ref()?.as_any().downcast_ref::<T>()
    }

    /// The retry policy every consumer uses unless it has its own.
    #[must_use]
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.parts.retry
    }

    /// Run this consumer.
    pub fn consumer(mut self, spec: ConsumerSpec) -> Self {
        self.consumers.push(spec);
        self
    }

    /// Keep what is published to `routes` for a consumer `name` that runs in another
    /// process, from start on (so a producer's messages are never unroutable before that
    /// process first starts).
    pub fn bind_for(mut self, name: &str, routes: &[&str]) -> Self {
        self.elsewhere.push((
            name.to_string(),
            routes.iter().map(|r| (*r).to_string()).collect(),
        ));
        self
    }

    /// Run the outbox relay with default settings: rows the application wrote into the
    /// outbox in its own transactions are published with confirmations.
    pub fn relay(self) -> Self {
        self.relay_with(RelayConfig::default())
    }

    /// Run the outbox relay with `config`.
    pub fn relay_with(mut self, config: RelayConfig) -> Self {
        self.relay = Some(config);
        self
    }

    /// The workload the transport is opened for: the prefix, the declared ladder, and every
    /// consumer with its routes.
    fn workload(&self) -> Workload {
        let mut w = Workload::new(self.parts.prefix.clone(), self.parts.retry.ladder.clone());
        for c in &self.consumers {
            let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
            w = w.consumer(c.name(), &routes);
        }
        for (name, routes) in &self.elsewhere {
            let routes: Vec<&str> = routes.iter().map(String::as_str).collect();
            w = w.consumer(name, &routes);
        }
        w
    }

    /// Connect the broker (its topology made from the declared ladder and the consumers),
    /// check every consumer against what the transport keeps (a ladder it has no stage for is
    /// refused here, naming both), attach each consumer, start the relay and the parking
    /// ingest, and return once every consumer is attached: from then on the program is
    /// ready. Nothing is left running when this fails.
    pub async fn start(self) -> Result<Running> {
        if self.relay.is_some() && self.parts.outbox.is_none() {
            return Err(Error::new(
                ErrorKind::Config,
                "the relay needs an outbox: give a database URL or an opened outbox",
            ));
        }
        let mut names = std::collections::HashSet::new();
        if let Some(c) = self.consumers.iter().find(|c| !names.insert(c.name())) {
            return Err(Error::new(
                ErrorKind::Config,
                format!("two consumers are named {:?}", c.name()),
            ));
        }
        let workload = self.workload();
        let (transport, owned) = match &self.parts.transport {
            TransportSource::Given(t) => (t.clone(), false),
            TransportSource::Opened(t) => (t.clone(), true),
            TransportSource::Broker(endpoint) => {
                let spec = TransportSpec::of(workload.clone());
                let registry = &self.parts.registry;
                // The broker's side of the workload (stage queues with their delays, work
                // queues, bindings), where the transport has a topology to apply.
                match registry.topology(endpoint, &spec).await {
                    Ok(topology) => {
                        topology.apply().await.map_err(from_ops)?;
                    }
                    Err(e) if e.message.contains(NO_TOPOLOGY) => {}
                    Err(e) => return Err(from_ops(e)),
                }
                let t = registry
                    .open_transport(endpoint, &spec)
                    .await
                    .map_err(from_ops)?;
                (t, true)
            }
        };
        match self.attach(transport.clone()).await {
            Ok(running) => Ok(running.owning_transport(owned)),
            Err(e) => {
                if owned {
                    transport.close().await;
                }
                Err(e)
            }
        }
    }

    async fn attach(self, transport: Arc<dyn Transport>) -> Result<Running> {
        let capabilities = transport.capabilities();
        // Every check before anything is attached.
        let mut built = Vec::with_capacity(self.consumers.len());
        for spec in self.consumers {
            let mut config = spec.config;
            if !spec.own_retry {
                config.retry = self.parts.retry.clone();
            }
            let prefetch = spec
                .prefetch
                .unwrap_or_else(|| config.concurrency.saturating_mul(2).max(1));
            let routes: Vec<&str> = spec.routes.iter().map(String::as_str).collect();
            let subscription = Subscription::new(config.name.clone(), &routes).prefetch(prefetch);
            subscription.validate()?;
            let consumer = Consumer::for_transport(config, spec.handler, &capabilities)?;
            built.push((consumer, subscription));
        }
        for (name, routes) in &self.elsewhere {
            let routes: Vec<&str> = routes.iter().map(String::as_str).collect();
            transport
                .bind(&Subscription::new(name.clone(), &routes))
                .await?;
        }
        let (stop, stop_rx) = watch::channel(false);
        let mut running = Running::new(transport.clone(), stop);
        for (consumer, subscription) in built {
            let subscriber = match transport.subscribe(&subscription).await {
                Ok(s) => s,
                Err(e) => {
                    running.shutdown().await;
                    return Err(e);
                }
            };
            let stats = consumer.stats();
            let rx = stop_rx.clone();
            let task = tokio::spawn(async move { consumer.run(subscriber, rx).await });
            if let Some(parking) = &self.parts.parking {
                let ingest = ParkingIngest::new(subscription.consumer.clone(), parking.clone());
                let (t, rx) = (transport.clone(), stop_rx.clone());
                running.push_task(tokio::spawn(
                    async move { ingest.run(t.as_ref(), rx).await },
                ));
            }
            running.push_consumer(RunningConsumer {
                name: subscription.consumer,
                stats,
                task,
            });
        }
        if let (Some(config), Some(outbox)) = (self.relay, self.parts.outbox) {
            let relay = OutboxRelay::new(outbox, transport.publisher(), config);
            let rx = stop_rx.clone();
            running.set_relay(tokio::spawn(async move { relay.run(rx).await }));
        }
        Ok(running)
    }
}
