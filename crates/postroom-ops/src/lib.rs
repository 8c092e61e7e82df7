//! # postroom-ops
//!
//! What every operator tool shares — the `postroom` command line today, the web console
//! next — so that neither names a broker or a database itself:
//!
//! - [`endpoint`]: database and broker URLs (a SQLite file is a path), parsed without ever
//!   echoing a password; [`redact()`] is the one function every printed URL goes through;
//!   [`credentials`]: passwords from a file or the environment instead of the command line;
//! - [`registry`]: stores and transports by URL scheme (the facade's registry: each driver
//!   lives in its own crate); stacks are opened through `postroom::Service`, and the
//!   operations here run over the [`postroom::Stack`] a started service holds;
//! - [`workload`]: what a transport is opened for (prefix, ladder, consumers), from code or a
//!   topology file;
//! - [`parking`]: filters typed as text, JSON output with payloads hidden or capped, redrive
//!   and ingest runs; [`time`] and [`limits`]: the values operators type, checked;
//! - [`relay`]: the long-running relay of `postroom relay`, to one broker or, while a system
//!   moves between brokers, to several at once; [`feed`]: a broker's deliveries into a
//!   consumer's inbox queue (`postroom feed`), several feeds on one table.
//!
//! ```
//! use postroom_ops::{Endpoint, redact};
//!
//! let db = Endpoint::database("postgres://app:s3cret@db:5432/shop").unwrap();
//! assert_eq!(db.scheme(), "postgres");
//! assert_eq!(db.to_string(), "postgres://app:***@db:5432/shop");
//! assert_eq!(redact("amqp://guest:guest@mq/%2f"), "amqp://guest:***@mq/%2f");
//!
//! let since = postroom_ops::time::parse_time("2h", chrono::Utc::now()).unwrap();
//! assert!(postroom_ops::time::parse_time("9000000000000s", chrono::Utc::now()).is_err());
//! # let _ = since;
//! ```
//!
//! Opening a store by its URL:
//!
//! ```no_run
//! # async fn demo() -> postroom_ops::OpsResult {
//! use postroom_ops::registry::{Registry, StoreOptions};
//!
//! let registry = Registry::builtin();
//! let db = postroom_ops::Endpoint::database("app.db")?;
//! let store = registry.open_store(&db, &StoreOptions::default()).await?;
//! let parked = store.parking().count(&Default::default()).await?;
//! # let _ = parked; Ok(()) }
//! ```

#[cfg(feature = "clap")]
pub mod args;
pub mod credentials;
pub mod error;
pub mod feed;
pub mod limits;
pub mod output;
pub mod parking;
pub mod relay;
pub mod time;

pub use error::{OpsError, OpsErrorKind, OpsResult};
pub use postroom::registry;
pub use postroom::{Service, Stack};
pub use postroom_core::driver::redact::redact;
pub use postroom_core::driver::{Endpoint, UrlText, endpoint, redact, workload};
pub use postroom_core::driver::{TopologyFile, TransportSpec, Workload};
pub use registry::Registry;

/// The store of `stack`: the operations here always run on a service opened from a database
/// URL.
pub fn store_of(stack: &Stack) -> OpsResult<&std::sync::Arc<dyn registry::Store>> {
    stack
        .store()
        .ok_or_else(|| OpsError::usage("this operation needs a database: give --database"))
}
