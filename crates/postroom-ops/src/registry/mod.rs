//! Stores and transports by URL scheme. Each driver is one entry, compiled in by its cargo
//! feature (`sqlite`, `postgres`, `rabbitmq`, `nats`, `sqs`, `kafka`); nothing else
//! in the operator tools names a broker or a database.
//!
//! | scheme | driver | gives |
//! |---|---|---|
//! | file path, `sqlite:` | `sqlite` | store (outbox, parking) and its queue in tables |
//! | `postgres://`, `postgresql://` | `postgres` | store and its queue in tables |
//! | `amqp://`, `amqps://` | `rabbitmq` | transport (and its topology plan) |
//! | `nats://` | `nats` | transport (JetStream; and its topology plan) |
//! | `sqs://`, `sqs+fifo://` | `sqs` | transport (and its topology plan) |
//! | `kafka://` | `kafka` | transport (and its topology plan) |

#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(feature = "sqs")]
pub mod sqs;

use crate::endpoint::Endpoint;
use crate::error::{OpsError, OpsErrorKind, OpsResult};
use crate::workload::TransportSpec;
use postroom_core::{InboxLookup, OutboxStore, ParkingStore, QueueConfig, Transport, async_trait};
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// How to open a store.
#[derive(Clone, Debug, Default)]
pub struct StoreOptions {
    /// Table prefix (stores with prefixed tables; `None`: the store's default).
    pub table_prefix: Option<String>,
    /// Refuse to create a store that does not exist yet (a SQLite file that is not there).
    pub must_exist: bool,
}

/// Settings of a store's queue in tables.
#[derive(Clone, Copy, Debug)]
pub struct QueueOptions {
    /// How long a delivery stays leased before it is delivered again.
    pub lease: Duration,
    /// Deliveries handed out ahead.
    pub prefetch: usize,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            prefetch: 8,
        }
    }
}

impl QueueOptions {
    /// `config` (a store's queue defaults) with this lease and prefetch.
    pub fn apply(&self, config: QueueConfig) -> QueueConfig {
        config.lease(self.lease).prefetch(self.prefetch)
    }
}

/// An open store: outbox, parking lot, and a queue in its tables.
pub trait Store: Send + Sync + 'static {
    /// The driver's name (`sqlite`, `postgres`).
    fn driver(&self) -> &'static str;
    /// Where it is (redacted).
    fn location(&self) -> String;
    /// The relays' side of the outbox.
    fn outbox(&self) -> Arc<dyn OutboxStore>;
    /// The relays' side of the outbox, deleting each row once its publish is confirmed
    /// instead of marking it published; `None` where the store only marks (its published rows
    /// go at the retention purge).
    fn deleting_outbox(&self) -> Option<Arc<dyn OutboxStore>> {
        None
    }
    /// The parking lot.
    fn parking(&self) -> Arc<dyn ParkingStore>;
    /// The queue in this store's tables, as a transport.
    fn queue(&self, options: &QueueOptions) -> OpsResult<Arc<dyn Transport>>;
    /// The consumers' inboxes in this store, for redrive to ask what is already applied.
    fn inbox(&self) -> Option<Arc<dyn InboxLookup>> {
        None
    }
    /// Table prefix of the postroom tables, when the store has one.
    fn table_prefix(&self) -> Option<String> {
        None
    }
    /// `consumer`'s inbox queue in this store's tables, for feeds that store deliveries into
    /// it (see [`postroom_core::inbox_feed`]); `ordered`: rows carry their aggregate key and
    /// version for the workers' ordered mode.
    fn inbox_feed(
        &self,
        consumer: &str,
        ordered: bool,
    ) -> OpsResult<Arc<dyn postroom_core::InboxFeed>> {
        let _ = (consumer, ordered);
        Err(OpsError::usage(format!(
            "the {} store has no inbox queue (use postgres://)",
            self.driver()
        )))
    }
    /// The consumers' last errors kept in this store's tables, when it keeps them.
    fn last_errors(&self) -> Option<Arc<dyn postroom_core::parking::LastErrorLog>> {
        None
    }
    /// The concrete store (`SqliteStore`, `PgStore`), for an application that writes its own
    /// tables in the same transactions (the demo's shop).
    fn as_any(&self) -> &dyn Any;
}

/// What every driver says about itself.
pub trait Driver: Send + Sync + 'static {
    /// Name (`sqlite`, `postgres`, `rabbitmq`).
    fn name(&self) -> &'static str;
    /// URL schemes it opens.
    fn schemes(&self) -> &'static [&'static str];
}

/// Opens stores of some schemes.
///
/// Opening is not `Send`: rustc cannot prove the `Send` bound of the stores' migration
/// futures from outside their crates (rust-lang/rust#102211). Open stores where the program
/// starts (a command, a server's start-up), not inside spawned tasks; the open store itself
/// is `Send + Sync` and everything it hands out is too.
#[async_trait(?Send)]
pub trait StoreDriver: Driver {
    /// Open (creating and migrating the tables as needed).
    async fn open(&self, endpoint: &Endpoint, options: &StoreOptions) -> OpsResult<Arc<dyn Store>>;
}

/// One planned change of a broker's topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedChange {
    /// What would change, for people.
    pub text: String,
    /// A change the tool refuses to make (something would have to be recreated).
    pub conflict: bool,
}

/// A topology to compare with a broker and apply.
#[async_trait]
pub trait TopologyPlan: Send + Sync {
    /// What `apply` would change (nothing on an up-to-date broker).
    async fn plan(&self) -> OpsResult<Vec<PlannedChange>>;
    /// Make the changes; returns how many were made.
    async fn apply(&self) -> OpsResult<usize>;
}

/// A broker's own topology as a [`TopologyPlan`].
#[cfg(any(
    feature = "kafka",
    feature = "nats",
    feature = "rabbitmq",
    feature = "sqs"
))]
pub(crate) struct Planned<T>(pub T);

#[cfg(any(
    feature = "kafka",
    feature = "nats",
    feature = "rabbitmq",
    feature = "sqs"
))]
#[async_trait]
impl<T: postroom_core::BrokerTopology + 'static> TopologyPlan for Planned<T> {
    async fn plan(&self) -> OpsResult<Vec<PlannedChange>> {
        use postroom_core::TopologyChange;
        Ok(self
            .0
            .plan()
            .await?
            .iter()
            .map(|c| PlannedChange {
                text: c.to_string(),
                conflict: c.is_conflict(),
            })
            .collect())
    }

    async fn apply(&self) -> OpsResult<usize> {
        use postroom_core::TopologyChange;
        Ok(self.0.apply().await?.iter().filter(|c| c.is_made()).count())
    }
}

/// `config` with every consumer of `spec`'s workload added to it on its routes by `add`
/// (a broker configuration's own `with_consumer`).
#[cfg(any(
    feature = "kafka",
    feature = "nats",
    feature = "rabbitmq",
    feature = "sqs"
))]
pub(crate) fn with_workload_consumers<C>(
    config: C,
    spec: &TransportSpec,
    add: impl Fn(C, &str, &[&str]) -> C,
) -> C {
    spec.workload.consumers.iter().fold(config, |config, c| {
        let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
        add(config, &c.name, &routes)
    })
}

/// Opens transports of some schemes.
#[async_trait]
pub trait TransportDriver: Driver {
    /// Connect for `spec`.
    async fn open(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> OpsResult<Arc<dyn Transport>>;
    /// The topology of `spec`, to plan and apply.
    async fn topology(
        &self,
        _endpoint: &Endpoint,
        _spec: &TransportSpec,
    ) -> OpsResult<Box<dyn TopologyPlan>> {
        Err(OpsError::usage(format!(
            "the {} transport has no topology to plan",
            self.name()
        )))
    }
}

/// Schemes postroom knows, with the cargo feature that brings their driver (for a clear
/// error when a build was made without it) and, for a broker that is never a database, the
/// broker's name (for a clear error when its address is given as the database).
const KNOWN: [(&str, &str, Option<&str>); 10] = [
    ("sqlite", "sqlite", None),
    ("postgres", "postgres", None),
    ("postgresql", "postgres", None),
    ("amqp", "rabbitmq", Some("RabbitMQ")),
    ("amqps", "rabbitmq", Some("RabbitMQ")),
    ("kafka", "kafka", Some("Kafka")),
    ("kafka+ssl", "kafka", Some("Kafka")),
    ("nats", "nats", Some("NATS")),
    ("sqs", "sqs", Some("SQS")),
    ("sqs+fifo", "sqs", Some("SQS")),
];

/// The drivers this build has.
pub struct Registry {
    stores: Vec<Box<dyn StoreDriver>>,
    transports: Vec<Box<dyn TransportDriver>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Registry {
    /// No drivers.
    #[must_use]
    pub fn empty() -> Self {
        Self {
            stores: Vec::new(),
            transports: Vec::new(),
        }
    }

    /// Every driver compiled into this build: one line per driver.
    #[must_use]
    pub fn builtin() -> Self {
        #[allow(unused_mut)]
        let mut r = Self::empty();
        #[cfg(feature = "sqlite")]
        r.add_store(sqlite::SqliteDriver);
        #[cfg(feature = "postgres")]
        r.add_store(postgres::PostgresDriver);
        #[cfg(feature = "rabbitmq")]
        r.add_transport(rabbitmq::RabbitDriver);
        #[cfg(feature = "nats")]
        r.add_transport(nats::NatsDriver);
        #[cfg(feature = "sqs")]
        r.add_transport(sqs::SqsDriver);
        #[cfg(feature = "kafka")]
        r.add_transport(kafka::KafkaDriver);
        r
    }

    /// Add a store driver.
    pub fn add_store(&mut self, driver: impl StoreDriver) {
        self.stores.push(Box::new(driver));
    }

    /// Add a transport driver.
    pub fn add_transport(&mut self, driver: impl TransportDriver) {
        self.transports.push(Box::new(driver));
    }

    /// Schemes of the stores this build opens.
    #[must_use]
    pub fn store_schemes(&self) -> Vec<&'static str> {
        schemes_of(&self.stores)
    }

    /// Schemes of the transports this build opens.
    #[must_use]
    pub fn transport_schemes(&self) -> Vec<&'static str> {
        schemes_of(&self.transports)
    }

    /// The store driver for `endpoint`.
    pub fn store_driver(&self, endpoint: &Endpoint) -> OpsResult<&dyn StoreDriver> {
        driver_for(&self.stores, endpoint, "database")
    }

    /// The transport driver for `endpoint`.
    pub fn transport_driver(&self, endpoint: &Endpoint) -> OpsResult<&dyn TransportDriver> {
        driver_for(&self.transports, endpoint, "broker")
    }

    /// Open the store at `endpoint`.
    pub async fn open_store(
        &self,
        endpoint: &Endpoint,
        options: &StoreOptions,
    ) -> OpsResult<Arc<dyn Store>> {
        let driver = self.store_driver(endpoint)?;
        scrubbed(driver.open(endpoint, options).await, endpoint)
    }

    /// Open the transport at `endpoint` for `spec`.
    pub async fn open_transport(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> OpsResult<Arc<dyn Transport>> {
        let driver = self.transport_driver(endpoint)?;
        scrubbed(driver.open(endpoint, spec).await, endpoint)
    }

    /// The topology of `spec` on the transport at `endpoint`.
    pub async fn topology(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> OpsResult<Box<dyn TopologyPlan>> {
        let driver = self.transport_driver(endpoint)?;
        scrubbed(driver.topology(endpoint, spec).await, endpoint)
    }
}

fn schemes_of<D: Driver + ?Sized>(drivers: &[Box<D>]) -> Vec<&'static str> {
    drivers.iter().flat_map(|d| d.schemes()).copied().collect()
}

fn driver_for<'a, D: Driver + ?Sized>(
    drivers: &'a [Box<D>],
    endpoint: &Endpoint,
    what: &str,
) -> OpsResult<&'a D> {
    drivers
        .iter()
        .find(|d| d.schemes().contains(&endpoint.scheme()))
        .map(AsRef::as_ref)
        .ok_or_else(|| unknown(what, endpoint, &schemes_of(drivers)))
}

/// A driver's answer, its error without the endpoint's password, whatever the driver quoted.
fn scrubbed<T>(answer: OpsResult<T>, endpoint: &Endpoint) -> OpsResult<T> {
    answer.map_err(|e| OpsError::new(e.kind, endpoint.scrub(&e.message)))
}

fn unknown(what: &str, endpoint: &Endpoint, built: &[&str]) -> OpsError {
    let scheme = endpoint.scheme();
    let known = KNOWN.iter().find(|(s, _, _)| *s == scheme);
    let message = match known {
        Some((_, _, Some(broker))) if what == "database" => format!(
            "{} is a {broker} broker, not a database: pass it as --broker; --database takes \
             a SQLite file path or a postgres:// URL",
            endpoint.redacted()
        ),
        Some((_, f, _)) => format!(
            "{what} {} needs the `{f}` driver, which this build of postroom does not have \
             (rebuild with `--features {f}`)",
            endpoint.redacted()
        ),
        None => format!(
            "unsupported {what} {}: this build opens {}",
            endpoint.redacted(),
            if built.is_empty() {
                "none (no driver features enabled)".to_string()
            } else {
                described(built).join(", ")
            }
        ),
    };
    OpsError::new(OpsErrorKind::Usage, message)
}

/// How a user writes an address of each scheme.
fn described(schemes: &[&str]) -> Vec<String> {
    schemes
        .iter()
        .map(|s| {
            if *s == "sqlite" {
                "a SQLite file path".to_string()
            } else {
                format!("a {s}:// URL")
            }
        })
        .collect()
}

/// Map a core error met while opening `endpoint` to an unreachable-server error that names it.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "rabbitmq",
        feature = "nats",
        feature = "sqs",
        feature = "kafka",
    )),
    allow(dead_code)
)]
pub(crate) fn cannot_reach(what: &str, endpoint: &Endpoint, e: postroom_core::Error) -> OpsError {
    let mut err = OpsError::from(e);
    err.message = endpoint.scrub(&format!(
        "cannot use {what} at {}: {}",
        endpoint.redacted(),
        err.message
    ));
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_or_missing_scheme_is_a_clear_error() {
        let r = Registry::empty();
        let e = r
            .transport_driver(&Endpoint::broker("kafka://u:pw1234@k:9092").unwrap())
            .err()
            .unwrap();
        assert!(e.message.contains("--features kafka"), "{e}");
        assert!(!e.message.contains("pw1234"), "{e}");
        let e = r
            .store_driver(&Endpoint::database("mysql://x").unwrap())
            .err()
            .unwrap();
        assert!(e.message.contains("unsupported database"), "{e}");
    }

    #[test]
    fn a_brokers_address_given_as_the_database_says_so_instead_of_asking_for_a_feature() {
        // In a build with every driver, `--database kafka://…` was answered with "needs the
        // `kafka` driver, which this build does not have": the build has it, as a broker.
        for (url, broker) in [
            ("kafka://u:pw1234@k:9092", "Kafka"),
            ("amqp://u:pw1234@r/%2f", "RabbitMQ"),
            ("nats://u:pw1234@n:4222", "NATS"),
            ("sqs://u:pw1234@s:5000", "SQS"),
        ] {
            for r in [Registry::empty(), Registry::builtin()] {
                let e = r
                    .store_driver(&Endpoint::database(url).unwrap())
                    .err()
                    .unwrap();
                assert_eq!(e.kind, OpsErrorKind::Usage, "{e}");
                assert!(
                    e.message
                        .contains(&format!("is a {broker} broker, not a database")),
                    "{e}"
                );
                assert!(e.message.contains("--broker"), "{e}");
                assert!(!e.message.contains("rebuild"), "{e}");
                assert!(!e.message.contains("pw1234"), "{e}");
            }
        }
    }

    #[cfg(all(feature = "sqlite", feature = "postgres", feature = "rabbitmq"))]
    #[test]
    fn every_builtin_scheme_has_one_driver() {
        let r = Registry::builtin();
        for s in ["sqlite", "postgres", "postgresql"] {
            assert_eq!(
                r.store_schemes().iter().filter(|x| **x == s).count(),
                1,
                "{s}"
            );
        }
        for s in ["amqp", "amqps"] {
            assert_eq!(
                r.transport_schemes().iter().filter(|x| **x == s).count(),
                1,
                "{s}"
            );
        }
    }
}
