//! What a store or transport crate implements to be opened by URL: the driver contract.
//!
//! Each store and transport crate exports its driver behind its own `driver` feature
//! (`postroom_nats::driver::NatsDriver`, …): its name, URL schemes, the cargo feature that
//! brings it, a one-line URL help, how a [`Workload`] and the topology file's own keys become
//! its configuration, its topology plan, and how it connects. The facade's registry is one list
//! of those drivers; nothing else names a broker or a database.
//!
//! - [`Endpoint`]: where a store or transport is (a URL, or a SQLite file path), printed only
//!   redacted; [`redact()`](redact::redact) is the one function every printed URL goes through;
//! - [`Workload`], [`TopologyFile`] and [`TransportSpec`]: what a transport is opened for;
//! - [`Store`]: an open store (outbox, parking lot, its queue in tables);
//! - [`StoreDriver`], [`TransportDriver`], [`TopologyPlan`]: the driver traits.

pub mod endpoint;
pub mod redact;
mod store;
pub mod text;
pub mod workload;

pub use endpoint::{Endpoint, SQLITE, UrlText};
pub use store::{QueueOptions, Store, StoreOptions};
pub use workload::{ConsumerRoutes, TopologyFile, TransportSpec, Workload};

use crate::error::{Error, Result};
use crate::transport::{BrokerTopology, TopologyChange, Transport};
use async_trait::async_trait;
use std::sync::Arc;

/// What every driver says about itself.
pub trait Driver: Send + Sync + 'static {
    /// Name (`sqlite`, `postgres`, `rabbitmq`): also the cargo feature that brings it.
    fn name(&self) -> &'static str;
    /// URL schemes it opens.
    fn schemes(&self) -> &'static [&'static str];
    /// How a user writes its address, in one line (`nats://host:4222 (NATS JetStream)`).
    fn url_help(&self) -> &'static str;
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
    async fn open(&self, endpoint: &Endpoint, options: &StoreOptions) -> Result<Arc<dyn Store>>;
}

/// Opens transports of some schemes.
#[async_trait]
pub trait TransportDriver: Driver {
    /// Connect for `spec`.
    async fn open(&self, endpoint: &Endpoint, spec: &TransportSpec) -> Result<Arc<dyn Transport>>;
    /// The topology of `spec`, to plan and apply; `None` for a transport whose consumers'
    /// queues are made when they bind (nothing to declare ahead).
    async fn topology(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> Result<Option<Box<dyn TopologyPlan>>> {
        let _ = (endpoint, spec);
        Ok(None)
    }
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
    async fn plan(&self) -> Result<Vec<PlannedChange>>;
    /// Make the changes; returns how many were made.
    async fn apply(&self) -> Result<usize>;
}

/// A broker's own topology as a [`TopologyPlan`].
pub struct Planned<T>(pub T);

#[async_trait]
impl<T: BrokerTopology + 'static> TopologyPlan for Planned<T> {
    async fn plan(&self) -> Result<Vec<PlannedChange>> {
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

    async fn apply(&self) -> Result<usize> {
        Ok(self.0.apply().await?.iter().filter(|c| c.is_made()).count())
    }
}

/// `config` with every consumer of `spec`'s workload added to it on its routes by `add`
/// (a broker configuration's own `with_consumer`).
pub fn with_workload_consumers<C>(
    config: C,
    spec: &TransportSpec,
    add: impl Fn(C, &str, &[&str]) -> C,
) -> C {
    spec.workload.consumers.iter().fold(config, |config, c| {
        let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
        add(config, &c.name, &routes)
    })
}

/// A core error met while opening `endpoint`, its kind kept, with a message that names the
/// server (`what`: `PostgreSQL`, `NATS`) and its redacted address, and no password.
#[must_use]
pub fn cannot_reach(what: &str, endpoint: &Endpoint, e: Error) -> Error {
    e.context(format_args!("cannot use {what} at {}", endpoint.redacted()))
        .scrubbed(|t| endpoint.scrub(t))
}
