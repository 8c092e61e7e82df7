//! # postroom-nats
//!
//! postroom on NATS JetStream (2.9): streams and durable pull consumers from a topology
//! configuration, a publisher confirmed by the stream's PubAck with `Nats-Msg-Id` = the message
//! id (a relay that republishes after a crash leaves one copy), deliveries acknowledged with
//! the server's confirmation after the inbox commit, retries as naks carrying the ladder's
//! delay (never a plain nak), Progress heartbeats for long handlers, parking with every
//! diagnostic, MAX_DELIVERIES advisories captured and turned into parked copies, and recovery
//! from missed heartbeats, deleted durables and server restarts.
//!
//! Connections reach secured servers the way production clusters ask: `tls://` with a CA
//! file, mutual TLS, and a user and password, a token, an NKey or a `.creds` file, each
//! from a file or the environment and never printed ([`security`]).
//!
//! Where things go, for prefix `shop` and consumer `inventory`:
//!
//! | what | name | notes |
//! |---|---|---|
//! | work stream | `shop` | subjects `shop.>` (topics) and `_pr.shop.direct.>`; `Nats-Msg-Id` window |
//! | topic | `shop.<topic>` | `shop.<topic>.<partition>` when a consumer is partitioned |
//! | durable per route filter | `inventory__<hash>` | one filter each (2.9 has one per durable); routes of one shape share one (`order.*`) |
//! | durable per partition | `inventory__<hash>_p<k>` | `max_ack_pending` 1: one copy at a time |
//! | direct durable | `inventory__direct` | `_pr.shop.direct.inventory` (redrive) |
//! | parking stream | `shop_parking_inventory` | `_pr.shop.parking.inventory` + the durables' advisories |
//! | ingest durable | `ingest` on the parking stream | feeds the parking store |
//!
//! ```
//! use postroom_nats::{NatsConfig, topology::DesiredTopology};
//!
//! let cfg = NatsConfig::from_toml(r#"
//!     prefix = "shop"
//!     ack_wait = "30s"
//!     max_deliver = 10
//!     [[consumers]]
//!     name = "inventory"
//!     routes = ["order.created"]
//! "#).unwrap();
//! let desired = DesiredTopology::of(&cfg);
//! assert!(desired.streams.iter().any(|s| s.name == "shop_parking_inventory"));
//! assert!(desired.consumers.iter().any(|c| c.config.filter_subject == "shop.order.created"));
//! ```
//!
//! A complete service on PostgreSQL and NATS (producer, relay, consumer with the inbox), wired
//! by the `postroom` crate's `Service`, is `examples/src/bin/postgres_nats.rs` in the
//! repository; copy it and change the handler. By hand, against a server (see `tests/` for
//! complete, running versions):
//!
//! ```no_run
//! # async fn demo() -> postroom_core::Result<()> {
//! use postroom_nats::*;
//!
//! let conn = NatsConnection::connect("nats://127.0.0.1:4222", "inventory").await?;
//! let cfg = NatsConfig::new("shop").with_consumer("inventory", &["order.created"]);
//! let topology = Topology::new(conn.clone(), cfg.clone())?;
//! for change in topology.plan().await? { println!("{change}"); }   // dry run
//! topology.apply().await?;
//! let transport = NatsTransport::new(conn, cfg)?;
//! // hand `transport` to postroom_core::Consumer::run_on and the relay
//! # let _ = transport; Ok(()) }
//! ```

pub mod backlog;
pub mod config;
pub mod connection;
pub mod dead_letters;
pub mod delivery;
#[cfg(feature = "driver")]
pub mod driver;
pub mod error;
pub mod headers;
pub mod naming;
pub mod publisher;
pub mod retry_book;
pub mod security;
pub mod subscriber;
pub mod topology;
pub mod transport;

pub use config::{ConsumerTopology, NatsConfig, Storage};
pub use connection::NatsConnection;
pub use dead_letters::{Advisory, DeadLetter, DeadLetterSubscriber};
pub use delivery::NatsDelivery;
pub use publisher::JetStreamPublisher;
pub use security::{NatsAuth, NatsSecurity, NatsTarget, Secret};
pub use subscriber::NatsSubscriber;
pub use topology::{Change, Topology};
pub use transport::NatsTransport;
