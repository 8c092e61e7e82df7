//! The store and broker a command works on, from flags, the environment and the config
//! file, with passwords from their sources.

use crate::cli::{BrokerArgs, StoreArgs};
use crate::config::ConfigFile;
use postroom::{Running, Service};
use postroom_ops::args::PasswordArgs;
use postroom_ops::registry::{Store, StoreOptions};
use postroom_ops::{Endpoint, OpsResult, Registry, TopologyFile, TransportSpec, UrlText};
use std::path::Path;
use std::sync::Arc;

/// The database: the flag (or `POSTROOM_DATABASE`), else the config file, else `postroom.db`.
pub fn database(
    store: &StoreArgs,
    config: &ConfigFile,
    passwords: &PasswordArgs,
) -> OpsResult<Endpoint> {
    let raw = store
        .database
        .as_ref()
        .map(|u| u.0.clone())
        .or_else(|| config.database.clone())
        .unwrap_or_else(|| "postroom.db".into());
    passwords.database().apply(Endpoint::database(&raw)?)
}

/// Open the parking store; `create` allows a SQLite file that does not exist yet.
pub async fn store(
    registry: &Registry,
    store: &StoreArgs,
    config: &ConfigFile,
    passwords: &PasswordArgs,
    create: bool,
) -> OpsResult<Arc<dyn Store>> {
    let endpoint = database(store, config, passwords)?;
    let options = StoreOptions {
        table_prefix: store
            .table_prefix
            .clone()
            .or_else(|| config.table_prefix.clone()),
        must_exist: !create,
        max_connections: None,
    };
    Ok(registry.open_store(&endpoint, &options).await?)
}

/// A broker URL with its password applied.
pub fn broker(url: &UrlText, passwords: &PasswordArgs) -> OpsResult<Endpoint> {
    passwords.broker().apply(Endpoint::broker(&url.0)?)
}

/// The broker and the workload of a topology file.
pub fn broker_and_topology(
    url: &UrlText,
    topology: &Path,
    passwords: &PasswordArgs,
) -> OpsResult<(Endpoint, TransportSpec)> {
    Ok((
        broker(url, passwords)?,
        TransportSpec::from_file(TopologyFile::read(topology)?),
    ))
}

/// [`broker_and_topology`] from the shared flags.
pub fn from_broker_args(
    args: &BrokerArgs,
    passwords: &PasswordArgs,
) -> OpsResult<(Endpoint, TransportSpec)> {
    broker_and_topology(&args.broker, &args.topology, passwords)
}

/// The store of `store` and, when given, a broker with its topology file, opened through
/// `postroom::Service` and started with nothing running but the stack (the broker's topology
/// is not declared: that is `postroom topology apply`'s). Shut it down when done.
pub async fn started(
    store: &StoreArgs,
    broker: Option<(&UrlText, &Path)>,
    config: &ConfigFile,
    passwords: &PasswordArgs,
    create: bool,
) -> OpsResult<Running> {
    let mut b = Service::builder()
        .database_at(database(store, config, passwords)?)
        .declare_topology(false);
    if let Some(prefix) = store.table_prefix.as_ref().or(config.table_prefix.as_ref()) {
        b = b.table_prefix(prefix);
    }
    if !create {
        b = b.existing_database();
    }
    if let Some((url, topology)) = broker {
        b = b
            .broker_at(self::broker(url, passwords)?)
            .topology(TopologyFile::read(topology)?);
    }
    Ok(b.open().await?.start().await?)
}
