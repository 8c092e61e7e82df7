//! # postroom-rabbitmq
//!
//! postroom on RabbitMQ: the topology of the source article declared from a config
//! with **policies** (TTL, dead-lettering `at-least-once`, `reject-publish`, `delivery-limit`)
//! through the management API, a confirming publisher that treats basic.return as failure,
//! a subscriber whose deliveries retry by a confirmed publish to a TTL stage before acking,
//! a parking queue ingested into any [`ParkingStore`](postroom_core::ParkingStore), reconnects
//! with a bounded backoff, partitioned ordering, and pipeline stages with taps.
//!
//! Where things go, for a consumer `inventory` under prefix `shop`:
//!
//! | what | name | how |
//! |---|---|---|
//! | work exchange | `orders` (topic) | consumers bind their keys |
//! | work queue | `shop.inventory` | policy: DLX `shop.inventory.dlx`, key `parked`, delivery limit |
//! | retry exchange | `shop.inventory.retry` (direct) | key `5s` → stage queue; key `shop.inventory` → work queue |
//! | stage queue | `shop.inventory.retry.5s` | policy: TTL 5000, DLX `shop.inventory.retry`, key `shop.inventory` |
//! | parking | `shop.inventory.dlx` (direct) → `shop.inventory.parking` | key `parked` |
//!
//! A retry publishes the copy to the retry exchange with the stage name as routing key; the
//! stage queue dead-letters it back to the work queue only (never to other consumers of the
//! topic). A redrive (`Route::Consumer`) goes the same last step: retry exchange, key = work
//! queue name.
//!
//! ```
//! use postroom_rabbitmq::{TopologyConfig, topology::DesiredTopology};
//!
//! let cfg = TopologyConfig::from_toml(r#"
//!     prefix = "shop"
//!     ladder = "5s,30s,5m"
//!     [[consumers]]
//!     name = "inventory"
//!     bindings = ["order.created"]
//! "#).unwrap();
//! let desired = DesiredTopology::of(&cfg);
//! assert!(desired.queues.iter().any(|q| q.name == "shop.inventory.retry.30s"));
//! assert!(desired.policies.iter().any(|p| p.definition.get("message-ttl") == Some(&30000.into())));
//! ```
//!
//! TLS: `amqps://…?cacertfile=/path/ca.pem` and `https://…?cacertfile=/path/ca.pem` for the
//! management API; certificates are always verified (see [`tls`]).
//!
//! A complete service on PostgreSQL and RabbitMQ (producer, relay, consumer with the inbox),
//! wired by the `postroom` crate's `Service`, is `examples/src/bin/postgres_rabbitmq.rs` in the
//! repository; copy it and change the handler. By hand, against a broker (see `tests/` for
//! complete, running versions):
//!
//! ```no_run
//! # async fn demo() -> postroom_core::Result<()> {
//! use postroom_rabbitmq::*;
//! use std::sync::Arc;
//!
//! let cfg = TopologyConfig::default().with_consumer("inventory", &["order.created"]);
//! let api = ManagementApi::new("http://guest:guest@127.0.0.1:15672", "/")?;
//! let topology = Topology::new(cfg.clone(), api)?;
//! for change in topology.plan().await? { println!("{change}"); }   // dry run
//! topology.apply().await?;
//!
//! let broker = Broker::connect("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! broker.redeclare_on_reconnect(topology.desired());
//! let publisher = Arc::new(ConfirmingPublisher::new(broker.clone(), &cfg));
//! let subscriber = RabbitSubscriber::new(broker, publisher, &cfg, "inventory", SubscriberOptions::new(8))?;
//! // hand `subscriber` to postroom_core::Consumer::run
//! # let _ = subscriber; Ok(()) }
//! ```

/// Items of the client (feature `client`, on by default); without it, the crate is the
/// topology file's model alone (the modules outside this macro).
macro_rules! client {
    ($($item:item)*) => { $( #[cfg(feature = "client")] $item )* };
}

pub mod config;
#[cfg(feature = "driver")]
pub mod driver;
pub mod management;
pub mod naming;
pub mod topology;

pub use config::{ConsumerTopology, QueueType, RetryStyle, TopologyConfig};
pub use naming::ConsumerNames;
pub use topology::Change;

client! {
    pub mod backlog;
    pub mod connection;
    pub mod delivery;
    pub mod error;
    pub mod headers;
    pub mod pipeline;
    pub mod publisher;
    mod retry;
    pub mod stats;
    pub mod subscriber;
    pub mod tls;
    pub mod transport;
    pub use backlog::RabbitBacklog;
    pub use connection::{Broker, BrokerOptions};
    pub use delivery::RabbitDelivery;
    pub use management::ManagementApi;
    pub use pipeline::{PipelineStage, Tap};
    pub use publisher::{ConfirmingPublisher, Outbound};
    pub use stats::LinkStats;
    pub use subscriber::{RabbitSubscriber, SubscriberOptions};
    pub use topology::Topology;
    pub use transport::RabbitTransport;
}
