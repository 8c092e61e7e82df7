//! Where a service's store and transport come from: URLs opened through the registry
//! (`app.db`, `postgres://…`, `amqp://…`), or objects the program opened itself.
//! The retry policy is declared here once: its ladder is what the transport's topology is
//! derived from, and every consumer of the service retries on it.

use crate::registry::Registry;
use crate::service::{Service, TransportSource};
use postroom_core::driver::{Endpoint, QueueOptions, Store, StoreOptions, TopologyFile};
use postroom_core::{Error, OutboxStore, ParkingStore, Result, RetryPolicy, Transport};
use std::sync::Arc;
use std::time::Duration;

/// Builds a [`Service`]; start with [`Service::builder`].
#[must_use]
pub struct ServiceBuilder {
    registry: Registry,
    database: Option<Result<Endpoint>>,
    opened: Option<Arc<dyn Store>>,
    broker: Option<Result<Endpoint>>,
    outbox: Option<Arc<dyn OutboxStore>>,
    parking: Option<Arc<dyn ParkingStore>>,
    transport: Option<Arc<dyn Transport>>,
    prefix: Option<String>,
    topology: Option<TopologyFile>,
    store: StoreOptions,
    delete_on_publish: bool,
    retry: Option<RetryPolicy>,
    queue: QueueOptions,
    fresh: bool,
    declare_topology: bool,
    redelivery_after: Option<Duration>,
}

impl std::fmt::Debug for ServiceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBuilder")
            .field("prefix", &self.prefix)
            .field("topology", &self.topology.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for ServiceBuilder {
    fn default() -> Self {
        Self {
            registry: Registry::builtin(),
            database: None,
            opened: None,
            broker: None,
            outbox: None,
            parking: None,
            transport: None,
            prefix: None,
            topology: None,
            store: StoreOptions::default(),
            delete_on_publish: false,
            retry: None,
            // Longer than the default handler timeout (30 s), as the queue requires.
            queue: QueueOptions {
                lease: Duration::from_secs(60),
                prefetch: 8,
            },
            fresh: false,
            declare_topology: true,
            redelivery_after: None,
        }
    }
}

impl ServiceBuilder {
    /// The database, by URL: a SQLite file path (or `sqlite:` URL), `postgres://…`. Opened
    /// and migrated by [`open`](Self::open); it holds the outbox, the inbox and the parking
    /// lot, and, without a broker, the queue.
    pub fn database(mut self, url: &str) -> Self {
        self.database = Some(Endpoint::database(url));
        self
    }

    /// The database as a parsed [`Endpoint`] (a password from a file already applied).
    pub fn database_at(mut self, endpoint: Endpoint) -> Self {
        self.database = Some(Ok(endpoint));
        self
    }

    /// The broker, by URL: one of [`Registry::transport_help`]'s forms (`amqp://…`,
    /// `nats://…`, `kafka://…`, `sqs://…`, each with its cargo feature). Without one, messages
    /// travel through the queue in the database's own tables.
    pub fn broker(mut self, url: &str) -> Self {
        self.broker = Some(Endpoint::broker(url));
        self
    }

    /// The broker as a parsed [`Endpoint`].
    pub fn broker_at(mut self, endpoint: Endpoint) -> Self {
        self.broker = Some(Ok(endpoint));
        self
    }

    /// A store another service (or the program, through the registry) already opened: its
    /// outbox, parking lot and inboxes are shared, not opened twice. E.g. a second service on
    /// another broker over the same database while a system moves between brokers.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.opened = Some(store);
        self
    }

    /// An outbox the program opened itself (the relay's side; needed for
    /// [`Service::relay`]).
    pub fn outbox(mut self, outbox: Arc<dyn OutboxStore>) -> Self {
        self.outbox = Some(outbox);
        self
    }

    /// A parking lot the program opened itself: copies a broker dead-lettered by itself are
    /// moved into it while the service runs.
    pub fn parking(mut self, parking: Arc<dyn ParkingStore>) -> Self {
        self.parking = Some(parking);
        self
    }

    /// A transport the program opened itself (its topology is the program's business).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// The prefix of every name the service owns on the broker (queues, exchanges,
    /// streams). Default `postroom`. On RabbitMQ the work exchange is `{prefix}.events` and
    /// each consumer's queues are `{prefix}.{consumer}`, `….retry.<delay>` and `….parking`
    /// (each transport's naming is in its crate's `naming` module).
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = Some(prefix.to_string());
        self
    }

    /// The workload from a topology file: its prefix, its ladder (the service's retry ladder
    /// unless [`retry`](Self::retry) sets another, which is refused), its consumers (bound
    /// at start, so nothing published for them is unroutable) and the broker's own keys.
    pub fn topology(mut self, file: TopologyFile) -> Self {
        self.topology = Some(file);
        self
    }

    /// The prefix of postroom's tables in a PostgreSQL database (default `postroom_`).
    pub fn table_prefix(mut self, prefix: &str) -> Self {
        self.store.table_prefix = Some(prefix.to_string());
        self
    }

    /// Connections in the store's pool when the database is given by URL (default: the
    /// store's own, 10 on PostgreSQL). Each consumer's handler calls and the relay take
    /// connections from it.
    pub fn pool_size(mut self, connections: u32) -> Self {
        self.store.max_connections = Some(connections);
        self
    }

    /// Refuse to create a database that does not exist yet (a SQLite file that is not
    /// there), instead of creating it.
    pub fn existing_database(mut self) -> Self {
        self.store.must_exist = true;
        self
    }

    /// The relay deletes each outbox row once its publish is confirmed instead of marking
    /// it published (where the store can: PostgreSQL), so no retention purge is needed.
    pub fn delete_on_publish(mut self) -> Self {
        self.delete_on_publish = true;
        self
    }

    /// The retry policy, declared once: the broker's delay stages are made from its ladder,
    /// and every consumer retries on it.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// How long a delivery of the queue in the database stays leased before it is delivered
    /// again (default 60 s; longer than any handler timeout).
    pub fn queue_lease(mut self, lease: Duration) -> Self {
        self.queue.lease = lease;
        self
    }

    /// Deliveries the queue in the database hands out ahead (default 8).
    pub fn queue_prefetch(mut self, prefetch: usize) -> Self {
        self.queue.prefetch = prefetch;
        self
    }

    /// How long a delivery nobody settles stays owned before the broker delivers it again,
    /// where it has such a setting (NATS `ack_wait`, SQS's visibility timeout), unless the
    /// topology file sets it.
    pub fn redelivery_after(mut self, after: Duration) -> Self {
        self.redelivery_after = Some(after);
        self
    }

    /// Start from an empty broker state: delete whatever the prefix names on the broker and
    /// declare the topology afresh at [`Service::start`]. For a run that owns its names (a
    /// demo, a test, a soak) — never for a service that shares its broker.
    pub fn fresh(mut self) -> Self {
        self.fresh = true;
        self
    }

    /// Whether [`Service::start`] declares the workload on the broker (its topology, and the
    /// bindings of consumers that run elsewhere). Default yes; a process that must never
    /// change the broker (a console, a parking ingest) says no, and the topology is then
    /// declared by `postroom topology apply` or the services themselves.
    pub fn declare_topology(mut self, declare: bool) -> Self {
        self.declare_topology = declare;
        self
    }

    /// Open stores and transports with these drivers instead of the built-in ones.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// Open the database (creating and migrating postroom's tables) and check the settings.
    /// The broker is connected by [`Service::start`], once the consumers are known.
    ///
    /// This future is not `Send` when a database URL is given (see
    /// [`StoreDriver`](postroom_core::driver::StoreDriver)): call it where the program
    /// starts, e.g. in `#[tokio::main] async fn main`, not inside `tokio::spawn`.
    pub async fn open(self) -> Result<Service> {
        let by_url_and_opened = usize::from(self.database.is_some())
            + usize::from(self.opened.is_some())
            + usize::from(self.outbox.is_some() || self.parking.is_some());
        if by_url_and_opened > 1 {
            return Err(Error::config(
                "give the database one way: by URL, as an opened store, or as opened objects",
            ));
        }
        if self.broker.is_some() && self.transport.is_some() {
            return Err(Error::config(
                "give the broker either by URL or as an opened transport, not both",
            ));
        }
        let (prefix, retry, topology_text, elsewhere) = self.workload_parts()?;
        // A broker this build cannot open is refused before anything is opened.
        let broker = match self.broker {
            Some(endpoint) => {
                let endpoint = endpoint?;
                self.registry.transport_driver(&endpoint)?;
                Some(endpoint)
            }
            None => None,
        };
        let store = match (self.database, self.opened) {
            (Some(endpoint), _) => Some(self.registry.open_store(&endpoint?, &self.store).await?),
            (None, opened) => opened,
        };
        let outbox = match (self.outbox, &store) {
            (Some(o), _) => Some(o),
            (None, Some(s)) if self.delete_on_publish => Some(s.deleting_outbox().ok_or_else(
                || {
                    Error::config(format!(
                        "the {} store cannot delete rows on publish: its published rows go at the retention purge",
                        s.driver()
                    ))
                },
            )?),
            (None, Some(s)) => Some(s.outbox()),
            (None, None) => None,
        };
        let parking = self.parking.or_else(|| store.as_ref().map(|s| s.parking()));
        let transport = match (self.transport, broker, &store) {
            (Some(t), _, _) => TransportSource::Given(t),
            (None, Some(endpoint), _) => TransportSource::Broker(endpoint),
            (None, None, Some(s)) => TransportSource::Opened(s.queue(&self.queue)?),
            (None, None, None) => {
                return Err(Error::config(
                    "a service needs a transport: give a broker URL, a database URL (its queue in tables) or an opened transport",
                ));
            }
        };
        Ok(Service::new(crate::service::Parts {
            registry: self.registry,
            store,
            outbox,
            parking,
            transport,
            prefix,
            retry,
            topology_text,
            elsewhere,
            fresh: self.fresh,
            declare_topology: self.declare_topology,
            redelivery_after: self.redelivery_after,
        }))
    }

    /// The prefix, the retry policy, the topology file's text and the consumers it binds for
    /// other processes, from the builder's settings and its topology file (a contradiction
    /// between them is refused, naming both).
    #[allow(clippy::type_complexity)]
    fn workload_parts(
        &self,
    ) -> Result<(
        String,
        RetryPolicy,
        Option<String>,
        Vec<(String, Vec<String>)>,
    )> {
        let Some(file) = &self.topology else {
            return Ok((
                self.prefix.clone().unwrap_or_else(|| "postroom".into()),
                self.retry.clone().unwrap_or_default(),
                None,
                Vec::new(),
            ));
        };
        let w = &file.workload;
        if let Some(p) = &self.prefix
            && *p != w.prefix
        {
            return Err(Error::config(format!(
                "the topology file's prefix is {:?} and the service's {p:?}: give one",
                w.prefix
            )));
        }
        let retry = match (&self.retry, &w.ladder) {
            (Some(r), Some(l)) if r.ladder != *l => {
                return Err(Error::config(format!(
                    "the topology file's ladder is {l} and the service's retry ladder {}: give one",
                    r.ladder
                )));
            }
            (Some(r), _) => r.clone(),
            (None, Some(l)) => RetryPolicy::default().ladder(l.clone()),
            (None, None) => RetryPolicy::default(),
        };
        let elsewhere = w
            .consumers
            .iter()
            .map(|c| (c.name.clone(), c.routes.clone()))
            .collect();
        Ok((w.prefix.clone(), retry, Some(file.text.clone()), elsewhere))
    }
}
