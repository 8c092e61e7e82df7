//! An opened service: its store, the consumers and the relay it will run. [`Service::start`]
//! connects the broker with the workload derived from the declared retry ladder and the
//! consumers, checks every consumer against what the transport can keep, attaches them, and
//! returns only then.

use crate::builder::ServiceBuilder;
use crate::consumer::{ConsumerSpec, Kind};
use crate::registry::Registry;
use crate::running::{Running, RunningConsumer};
use crate::stack::Stack;
use postroom_core::consumer::BatchConsumer;
use postroom_core::driver::{Endpoint, Store, TransportSpec, Workload};
use postroom_core::parking::ParkingIngest;
use postroom_core::{
    Consumer, Error, OutboxRelay, OutboxStore, ParkingStore, RelayConfig, Result, RetryPolicy,
    Subscription, Transport,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

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
    /// The topology file's text, when the workload came from one.
    pub topology_text: Option<String>,
    /// Consumers that run in other processes, bound at start.
    pub elsewhere: Vec<(String, Vec<String>)>,
    pub fresh: bool,
    pub declare_topology: bool,
    pub redelivery_after: Option<Duration>,
}

/// A service, opened and not yet started: add its consumers and its relay, then
/// [`start`](Service::start) it.
#[must_use]
pub struct Service {
    parts: Parts,
    consumers: Vec<ConsumerSpec>,
    relay: Option<RelaySource>,
    ingest_elsewhere: bool,
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
            relay: None,
            ingest_elsewhere: false,
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

    /// The store the service opened from its database URL, as the drivers hand it out
    /// (outbox, parking lot, inboxes, its queue in tables).
    #[must_use]
    pub fn opened_store(&self) -> Option<&Arc<dyn Store>> {
        self.parts.store.as_ref()
    }

    /// The prefix of every name the service owns on the broker.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.parts.prefix
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
        self.parts.elsewhere.push((
            name.to_string(),
            routes.iter().map(|r| (*r).to_string()).collect(),
        ));
        self
    }

    /// Also move the dead-lettered copies of the consumers bound for other processes
    /// ([`bind_for`](Self::bind_for), the topology file's) into the parking lot while the
    /// service runs (what `postroom ingest` does). A service's own consumers always have
    /// theirs moved.
    pub fn ingest_parked(mut self) -> Self {
        self.ingest_elsewhere = true;
        self
    }

    /// Run the outbox relay with default settings: rows the application wrote into the
    /// outbox in its own transactions are published with confirmations.
    pub fn relay(self) -> Self {
        self.relay_with(RelayConfig::default())
    }

    /// Run the outbox relay with `config`.
    pub fn relay_with(mut self, config: RelayConfig) -> Self {
        self.relay = Some(RelaySource::Claiming(config));
        self
    }

    /// Run the WAL relay instead of the claiming one: the outbox's committed inserts are read
    /// from PostgreSQL's write-ahead log by logical decoding (a replication slot of the
    /// relay's own), so the relay writes nothing per message. The database must be
    /// PostgreSQL with `wal_level = logical`; [`start`](Self::start) checks it, creates the
    /// publication and the slot, and refuses with what is missing. Do not run the claiming
    /// relay on the same outbox as well (each would publish every row).
    #[cfg(feature = "postgres")]
    pub fn relay_from_wal(mut self, config: postroom_postgres::wal::WalRelayConfig) -> Self {
        self.relay = Some(RelaySource::Wal(config));
        self
    }

    /// The workload the transport is opened for: the prefix, the declared ladder, and every
    /// consumer with its routes (the service's own, then those bound for other processes,
    /// each name once).
    fn workload(&self) -> Result<Workload> {
        let mut w = Workload::new(self.parts.prefix.clone(), self.parts.retry.ladder.clone());
        for c in &self.consumers {
            if let Some((_, routes)) = self.parts.elsewhere.iter().find(|(n, _)| n == c.name())
                && *routes != c.routes
            {
                return Err(Error::config(format!(
                    "consumer {:?} takes {:?} here and {:?} in the topology file: give one",
                    c.name(),
                    c.routes,
                    routes
                )));
            }
            if self.parts.topology_text.is_some()
                && !self.parts.elsewhere.iter().any(|(n, _)| n == c.name())
            {
                return Err(Error::config(format!(
                    "consumer {:?} is not in the topology file: add it there as a [[consumers]] entry",
                    c.name()
                )));
            }
            let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
            w = w.consumer(c.name(), &routes);
        }
        for (name, routes) in &self.parts.elsewhere {
            if self.consumers.iter().any(|c| c.name() == name) {
                continue;
            }
            let routes: Vec<&str> = routes.iter().map(String::as_str).collect();
            w = w.consumer(name, &routes);
        }
        Ok(w)
    }

    /// Connect the broker (its topology made from the declared ladder and the consumers),
    /// check every consumer against what the transport keeps (a ladder it has no stage for is
    /// refused here, naming both), attach each consumer, start the relay and the parking
    /// ingest, and return once every consumer is attached: from then on the program is
    /// ready. Nothing is left running when this fails.
    pub async fn start(self) -> Result<Running> {
        match &self.relay {
            Some(RelaySource::Claiming(_)) if self.parts.outbox.is_none() => {
                return Err(Error::config(
                    "the relay needs an outbox: give a database URL or an opened outbox",
                ));
            }
            #[cfg(feature = "postgres")]
            Some(RelaySource::Wal(_)) if self.store::<postroom_postgres::PgStore>().is_none() => {
                return Err(Error::config(
                    "the WAL relay reads PostgreSQL's write-ahead log: the database must be a postgres:// URL or an opened PgStore",
                ));
            }
            _ => {}
        }
        let mut names = std::collections::HashSet::new();
        if let Some(c) = self.consumers.iter().find(|c| !names.insert(c.name())) {
            return Err(Error::config(format!(
                "two consumers are named {:?}",
                c.name()
            )));
        }
        let workload = self.workload()?;
        let (transport, owned, exact_figures) = match &self.parts.transport {
            TransportSource::Given(t) => (t.clone(), false, false),
            TransportSource::Opened(t) => (t.clone(), true, true),
            TransportSource::Broker(endpoint) => {
                let spec = TransportSpec {
                    workload: workload.clone(),
                    topology_text: self.parts.topology_text.clone(),
                    fresh: self.parts.fresh,
                    redelivery_after: self.parts.redelivery_after,
                    // The store's log: a copy the broker dead-letters by itself keeps its
                    // last error whichever process ingests it, and across restarts.
                    last_errors: self.parts.store.as_ref().and_then(|s| s.last_errors()),
                };
                let registry = &self.parts.registry;
                // The broker's side of the workload (stage queues with their delays, work
                // queues, bindings), where the transport has a topology to apply.
                if self.parts.declare_topology
                    && let Some(topology) = registry.topology(endpoint, &spec).await?
                {
                    topology.apply().await?;
                }
                (registry.open_transport(endpoint, &spec).await?, true, false)
            }
        };
        let stack = Stack::new(
            self.parts.store.clone(),
            transport.clone(),
            workload,
            exact_figures,
        );
        match self.attach(stack).await {
            Ok(running) => Ok(running.owning_transport(owned)),
            Err(e) => {
                if owned {
                    transport.close().await;
                }
                Err(e)
            }
        }
    }

    async fn attach(self, stack: Stack) -> Result<Running> {
        #[cfg(feature = "postgres")]
        let pg = self.store::<postroom_postgres::PgStore>().cloned();
        let transport = stack.transport().clone();
        let capabilities = transport.capabilities();
        // Every check before anything is attached.
        let mut built = Vec::with_capacity(self.consumers.len());
        for spec in self.consumers {
            let prefetch = spec.effective_prefetch();
            let batch = spec.batch_config()?;
            let mut config = spec.config;
            if !spec.own_retry {
                config.retry = self.parts.retry.clone();
            }
            let routes: Vec<&str> = spec.routes.iter().map(String::as_str).collect();
            let subscription = Subscription::new(config.name.clone(), &routes).prefetch(prefetch);
            subscription.validate()?;
            #[cfg(feature = "postgres")]
            if let Some(mode) = spec.inbox_queue {
                let Kind::Each(handler) = spec.handler else {
                    return Err(Error::config(format!(
                        "consumer {:?}: a batched consumer has no inbox-queue mode",
                        config.name
                    )));
                };
                let Some(store) = &pg else {
                    return Err(Error::config(format!(
                        "consumer {:?}: the inbox-queue mode keeps its queue in PostgreSQL: the database must be a postgres:// URL",
                        config.name
                    )));
                };
                let iq = postroom_postgres::InboxQueueConfig {
                    workers: mode.workers,
                    batch: mode.batch,
                    lease: mode.lease,
                    poll_interval: mode.poll_interval,
                    ordered: mode.ordered,
                    ..postroom_postgres::InboxQueueConfig::new(config.clone())
                };
                let queue = postroom_postgres::InboxQueue::new(
                    store.pool().clone(),
                    store.prefix().clone(),
                    iq,
                )?;
                let step = postroom_core::consumer::Step::new(config, handler);
                built.push((Loop::Queue(queue, step), subscription));
                continue;
            }
            let consumer = match spec.handler {
                Kind::Batch(handler) => Loop::Batch(BatchConsumer::for_transport(
                    config,
                    batch.unwrap_or_default(),
                    handler,
                    &capabilities,
                )?),
                Kind::Each(handler) => {
                    Loop::Each(Consumer::for_transport(config, handler, &capabilities)?)
                }
            };
            built.push((consumer, subscription));
        }
        for (name, routes) in self
            .parts
            .elsewhere
            .iter()
            .filter(|_| self.parts.declare_topology)
        {
            let routes: Vec<&str> = routes.iter().map(String::as_str).collect();
            transport
                .bind(&Subscription::new(name.clone(), &routes))
                .await?;
        }
        let (stop, stop_rx) = watch::channel(false);
        let mut running = Running::new(stack, stop);
        let mut ingested = Vec::new();
        for (consumer, subscription) in built {
            let subscriber = match transport.subscribe(&subscription).await {
                Ok(s) => s,
                Err(e) => {
                    running.shutdown().await;
                    return Err(e);
                }
            };
            let rx = stop_rx.clone();
            let (stats, task) = match consumer {
                Loop::Each(c) => (
                    c.stats(),
                    tokio::spawn(async move { c.run(subscriber, rx).await }),
                ),
                Loop::Batch(c) => (
                    c.stats(),
                    tokio::spawn(async move { c.run(subscriber, rx).await }),
                ),
                // Persist then ack on one side, the workers on the other; both stop on the
                // service's shutdown.
                #[cfg(feature = "postgres")]
                Loop::Queue(queue, step) => (
                    step.stats(),
                    tokio::spawn(async move {
                        let workers_rx = rx.clone();
                        tokio::join!(
                            queue.ingest(subscriber, rx),
                            queue.run_workers_on(step, workers_rx)
                        );
                    }),
                ),
            };
            ingested.push(subscription.consumer.clone());
            running.push_consumer(RunningConsumer {
                name: subscription.consumer,
                stats,
                task,
            });
        }
        if self.ingest_elsewhere {
            for (name, _) in &self.parts.elsewhere {
                if !ingested.contains(name) {
                    ingested.push(name.clone());
                }
            }
        }
        if let Some(parking) = &self.parts.parking {
            for name in ingested {
                let ingest = ParkingIngest::new(name, parking.clone());
                let (t, rx) = (transport.clone(), stop_rx.clone());
                running.push_task(tokio::spawn(
                    async move { ingest.run(t.as_ref(), rx).await },
                ));
            }
        }
        match (self.relay, self.parts.outbox) {
            (Some(RelaySource::Claiming(config)), Some(outbox)) => {
                let relay = OutboxRelay::new(outbox, transport.publisher(), config);
                let rx = stop_rx.clone();
                running.set_relay(tokio::spawn(async move { relay.run(rx).await }));
            }
            #[cfg(feature = "postgres")]
            (Some(RelaySource::Wal(config)), _) => {
                let store = pg.expect("checked at start");
                let relay = match postroom_postgres::wal::WalRelay::new(
                    &store,
                    transport.publisher(),
                    config,
                ) {
                    Ok(r) => r,
                    Err(e) => {
                        running.shutdown().await;
                        return Err(e);
                    }
                };
                // Logical decoding, the publication and the slot: what is missing is an
                // error now, not a warning in a loop.
                if let Err(e) = relay.prepare().await {
                    running.shutdown().await;
                    return Err(e);
                }
                let rx = stop_rx.clone();
                running.set_relay(tokio::spawn(async move { relay.run(rx).await }));
            }
            _ => {}
        }
        Ok(running)
    }
}

/// A consumer loop ready to run: per message or in batches.
enum Loop {
    Each(Consumer<dyn postroom_core::Handler>),
    Batch(BatchConsumer<dyn postroom_core::BatchHandler>),
    #[cfg(feature = "postgres")]
    Queue(
        postroom_postgres::InboxQueue,
        postroom_core::consumer::Step<dyn postroom_core::Handler>,
    ),
}

/// Which relay a service runs.
enum RelaySource {
    /// The claiming relay: leases on outbox rows, marked (or deleted) after each confirm.
    Claiming(RelayConfig),
    /// The WAL relay: the outbox's inserts read from PostgreSQL's write-ahead log.
    #[cfg(feature = "postgres")]
    Wal(postroom_postgres::wal::WalRelayConfig),
}
