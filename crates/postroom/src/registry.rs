//! Stores and transports by URL scheme: one list of the drivers postroom knows, each compiled
//! in by its cargo feature and living in its own crate (`postroom_nats::driver`, …). Every
//! other list — the schemes this build opens, the error for a scheme whose driver the build
//! lacks, the command line's `--database`/`--broker` help — is derived from it.
//!
//! Adding a transport is its crate (with a `driver` module behind a `driver` feature), one
//! line in [`known_drivers!`](crate::registry) below, and one feature line in each manifest
//! that offers it (`docs/adding-a-transport.md`).

use postroom_core::driver::{Endpoint, StoreDriver, TransportDriver, TransportSpec};
use postroom_core::{Error, Result, Transport};
use std::sync::Arc;

pub use postroom_core::driver::{
    Driver, PlannedChange, QueueOptions, Store, StoreOptions, TopologyPlan,
};

/// Whether a driver opens stores (`--database`) or transports (`--broker`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverKind {
    /// A database: outbox, inbox, parking lot, and a queue in its tables.
    Store,
    /// A broker.
    Transport,
}

/// A driver postroom knows, whether this build has it or not.
#[derive(Clone, Copy, Debug)]
pub struct KnownDriver {
    /// Its name, which is also the cargo feature that brings it (`nats`).
    pub name: &'static str,
    /// What people call the server (`NATS`).
    pub title: &'static str,
    /// The URL schemes it opens.
    pub schemes: &'static [&'static str],
    /// Store or transport.
    pub kind: DriverKind,
    /// Whether this build has it.
    pub built: bool,
}

/// The one list: for each driver, its kind, name (= cargo feature), title, schemes and type.
macro_rules! known_drivers {
    ($($kind:ident $name:literal $title:literal [$($scheme:literal),+] => $driver:path;)+) => {
        /// Every driver postroom knows, in the order the registry tries them.
        pub const KNOWN: &[KnownDriver] = &[$(KnownDriver {
            name: $name,
            title: $title,
            schemes: &[$($scheme),+],
            kind: DriverKind::$kind,
            built: cfg!(feature = $name),
        }),+];

        fn add_builtin(_r: &mut Registry) {
            $(
                #[cfg(feature = $name)]
                known_drivers!(@add $kind, _r, $driver);
            )+
        }
    };
    (@add Store, $r:ident, $driver:path) => { $r.add_store($driver) };
    (@add Transport, $r:ident, $driver:path) => { $r.add_transport($driver) };
}

known_drivers! {
    Store "sqlite" "SQLite" ["sqlite"] => postroom_sqlite::driver::SqliteDriver;
    Store "postgres" "PostgreSQL" ["postgres", "postgresql"] => postroom_postgres::driver::PostgresDriver;
    Transport "rabbitmq" "RabbitMQ" ["amqp", "amqps"] => postroom_rabbitmq::driver::RabbitDriver;
    Transport "nats" "NATS" ["nats", "tls"] => postroom_nats::driver::NatsDriver;
    Transport "sqs" "SQS" ["sqs", "sqs+fifo"] => postroom_sqs::driver::SqsDriver;
    Transport "kafka" "Kafka" ["kafka", "kafka+ssl"] => postroom_kafka::driver::KafkaDriver;
}

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

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("stores", &names(&self.stores))
            .field("transports", &names(&self.transports))
            .finish()
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

    /// Every driver compiled into this build.
    #[must_use]
    pub fn builtin() -> Self {
        let mut r = Self::empty();
        add_builtin(&mut r);
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

    /// How to write each store's address, one line per driver of this build.
    #[must_use]
    pub fn store_help(&self) -> Vec<&'static str> {
        self.stores.iter().map(|d| d.url_help()).collect()
    }

    /// How to write each transport's address, one line per driver of this build.
    #[must_use]
    pub fn transport_help(&self) -> Vec<&'static str> {
        self.transports.iter().map(|d| d.url_help()).collect()
    }

    /// The store driver for `endpoint`.
    pub fn store_driver(&self, endpoint: &Endpoint) -> Result<&dyn StoreDriver> {
        driver_for(&self.stores, endpoint, DriverKind::Store)
    }

    /// The transport driver for `endpoint`.
    pub fn transport_driver(&self, endpoint: &Endpoint) -> Result<&dyn TransportDriver> {
        driver_for(&self.transports, endpoint, DriverKind::Transport)
    }

    /// Open the store at `endpoint`.
    pub async fn open_store(
        &self,
        endpoint: &Endpoint,
        options: &StoreOptions,
    ) -> Result<Arc<dyn Store>> {
        let driver = self.store_driver(endpoint)?;
        scrubbed(driver.open(endpoint, options).await, endpoint)
    }

    /// Open the transport at `endpoint` for `spec`.
    pub async fn open_transport(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> Result<Arc<dyn Transport>> {
        let driver = self.transport_driver(endpoint)?;
        scrubbed(driver.open(endpoint, spec).await, endpoint)
    }

    /// The topology of `spec` on the transport at `endpoint`; `None` for a transport with
    /// nothing to declare ahead (its queues are made when consumers bind).
    pub async fn topology(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> Result<Option<Box<dyn TopologyPlan>>> {
        let driver = self.transport_driver(endpoint)?;
        scrubbed(driver.topology(endpoint, spec).await, endpoint)
    }
}

/// The broker URL forms this build opens, one per driver (`amqp://… (RabbitMQ); nats://…`),
/// for help texts: derived from the drivers, never written beside them.
#[must_use]
pub fn broker_forms() -> String {
    Registry::builtin().transport_help().join("; ")
}

/// The database forms this build opens, one per driver, for help texts.
#[must_use]
pub fn database_forms() -> String {
    Registry::builtin().store_help().join("; ")
}

fn names<D: Driver + ?Sized>(drivers: &[Box<D>]) -> Vec<&'static str> {
    drivers.iter().map(|d| d.name()).collect()
}

fn schemes_of<D: Driver + ?Sized>(drivers: &[Box<D>]) -> Vec<&'static str> {
    drivers.iter().flat_map(|d| d.schemes()).copied().collect()
}

fn driver_for<'a, D: Driver + ?Sized>(
    drivers: &'a [Box<D>],
    endpoint: &Endpoint,
    kind: DriverKind,
) -> Result<&'a D> {
    drivers
        .iter()
        .find(|d| d.schemes().contains(&endpoint.scheme()))
        .map(AsRef::as_ref)
        .ok_or_else(|| unknown(kind, endpoint, drivers))
}

/// A driver's answer, its error (kind and source kept) without the endpoint's password,
/// whatever the driver quoted.
fn scrubbed<T>(answer: Result<T>, endpoint: &Endpoint) -> Result<T> {
    answer.map_err(|e| e.scrubbed(|t| endpoint.scrub(t)))
}

fn unknown<D: Driver + ?Sized>(kind: DriverKind, endpoint: &Endpoint, built: &[Box<D>]) -> Error {
    let what = match kind {
        DriverKind::Store => "database",
        DriverKind::Transport => "broker",
    };
    let scheme = endpoint.scheme();
    let known = KNOWN.iter().find(|d| d.schemes.contains(&scheme));
    let message = match known {
        Some(d) if d.kind == DriverKind::Transport && kind == DriverKind::Store => format!(
            "{} is a {} broker, not a database: pass it as --broker; --database takes \
             a SQLite file path or a postgres:// URL",
            endpoint.redacted(),
            d.title
        ),
        Some(d) if d.kind == kind => format!(
            "{what} {} needs the `{}` driver, which this build of postroom does not have \
             (rebuild with `--features {}`)",
            endpoint.redacted(),
            d.name,
            d.name
        ),
        _ => format!(
            "unsupported {what} {}: this build opens {}",
            endpoint.redacted(),
            if built.is_empty() {
                "none (no driver features enabled)".to_string()
            } else {
                built
                    .iter()
                    .map(|d| d.url_help())
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        ),
    };
    Error::config(message)
}

#[cfg(test)]
mod tests;
