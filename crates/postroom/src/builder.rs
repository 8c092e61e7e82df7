//! Where a service's store and transport come from: URLs opened through the operations
//! registry (`app.db`, `postgres://…`, `amqp://…`), or objects the program opened itself.
//! The retry policy is declared here once: its ladder is what the transport's topology is
//! derived from, and every consumer of the service retries on it.

use crate::error::from_ops;
use crate::service::{Service, TransportSource};
use postroom_core::{Error, ErrorKind, OutboxStore, ParkingStore, Result, RetryPolicy, Transport};
use postroom_ops::Endpoint;
use postroom_ops::registry::{QueueOptions, Registry, StoreOptions};
use std::sync::Arc;
use std::time::Duration;

/// Builds a [`Service`]; start with [`Service::builder`].
#[must_use]
pub struct ServiceBuilder {
    registry: Registry,
    database: Option<String>,
    broker: Option<String>,
    outbox: Option<Arc<dyn OutboxStore>>,
    parking: Option<Arc<dyn ParkingStore>>,
    transport: Option<Arc<dyn Transport>>,
    prefix: String,
    table_prefix: Option<String>,
    retry: RetryPolicy,
    queue: QueueOptions,
}

impl std::fmt::Debug for ServiceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBuilder")
            .field("prefix", &self.prefix)
            .field("ladder", &self.retry.ladder.to_string())
            .finish_non_exhaustive()
    }
}

impl Default for ServiceBuilder {
    fn default() -> Self {
        Self {
            registry: Registry::builtin(),
            database: None,
            broker: None,
            outbox: None,
            parking: None,
            transport: None,
            prefix: "postroom".into(),
            table_prefix: None,
            retry: RetryPolicy::default(),
            // Longer than the default handler timeout (30 s), as the queue requires.
            queue: QueueOptions {
                lease: Duration::from_secs(60),
                prefetch: 8,
            },
        }
    }
}

impl ServiceBuilder {
    /// The database, by URL: a SQLite file path (or `sqlite:` URL), `postgres://…`. Opened
    /// and migrated by [`open`](Self::open); it holds the outbox, the inbox and the parking
    /// lot, and, without a broker, the queue.
    pub fn database(mut self, url: &str) -> Self {
        self.database = Some(url.to_string());
        self
    }

    /// The broker, by URL (`amqp://…`; `sqs://…` and `kafka://…` with the `sqs` and `kafka`
    /// features). Without one, messages travel through the queue in the database's own tables.
    pub fn broker(mut self, url: &str) -> Self {
        self.broker = Some(url.to_string());
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
    /// streams). Default `postroom`.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }

    /// The prefix of postroom's tables in a PostgreSQL database (default `postroom_`).
    pub fn table_prefix(mut self, prefix: &str) -> Self {
        self.table_prefix = Some(prefix.to_string());
        self
    }

    /// The retry policy, declared once: the broker's delay stages are made from its ladder,
    /// and every consumer retries on it.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How long a delivery of the queue in the database stays leased before it is delivered
    /// again (default 60 s; longer than any handler timeout).
    pub fn queue_lease(mut self, lease: Duration) -> Self {
        self.queue.lease = lease;
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
    /// [`postroom_ops::registry::StoreDriver`]): call it where the program starts, e.g. in
    /// `#[tokio::main] async fn main`, not inside `tokio::spawn`.
    pub async fn open(self) -> Result<Service> {
        if self.database.is_some() && (self.outbox.is_some() || self.parking.is_some()) {
            return Err(config(
                "give the database either by URL or as opened objects, not both",
            ));
        }
        if self.broker.is_some() && self.transport.is_some() {
            return Err(config(
                "give the broker either by URL or as an opened transport, not both",
            ));
        }
        // A broker this build cannot open is refused before anything is opened.
        let broker = match &self.broker {
            Some(url) => {
                let endpoint = Endpoint::broker(url).map_err(from_ops)?;
                self.registry
                    .transport_driver(&endpoint)
                    .map_err(from_ops)?;
                Some(endpoint)
            }
            None => None,
        };
        let store = match &self.database {
            Some(url) => {
                let endpoint = Endpoint::database(url).map_err(from_ops)?;
                let options = StoreOptions {
                    table_prefix: self.table_prefix.clone(),
                    must_exist: false,
                };
                Some(
                    self.registry
                        .open_store(&endpoint, &options)
                        .await
                        .map_err(from_ops)?,
                )
            }
            None => None,
        };
        let outbox = self.outbox.or_else(|| store.as_ref().map(|s| s.outbox()));
        let parking = self.parking.or_else(|| store.as_ref().map(|s| s.parking()));
        let transport = match (self.transport, broker, &store) {
            (Some(t), _, _) => TransportSource::Given(t),
            (None, Some(endpoint), _) => TransportSource::Broker(endpoint),
            (None, None, Some(s)) => {
                TransportSource::Opened(s.queue(&self.queue).map_err(from_ops)?)
            }
            (None, None, None) => {
                return Err(config(
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
            prefix: self.prefix,
            retry: self.retry,
        }))
    }
}

fn config(message: &str) -> Error {
    Error::new(ErrorKind::Config, message)
}
