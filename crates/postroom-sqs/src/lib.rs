//! # postroom-sqs
//!
//! postroom on Amazon SQS: queues and DLQs from a topology, a relay publisher that batches
//! with `SendMessageBatch`, a consumer whose retries are visibility timeouts, the DLQs read
//! into the parking lot, FIFO message groups for per-aggregate order. The client is configured
//! from the standard AWS environment, so the same code talks to AWS or to a local endpoint.
//!
//! Where things go, for a consumer `inventory` under prefix `shop`:
//!
//! | what | where | how |
//! |---|---|---|
//! | work queue | `shop-inventory` (`.fifo`) | `RedrivePolicy` → the DLQ after `maxReceiveCount` receives |
//! | a topic publish | every consumer queue whose binding matches | SQS has no topics; see [`routes`] |
//! | a retry | the same message, hidden for the delay | `ChangeMessageVisibility`; the attempt from the receive count ([`attempt`]) |
//! | a slow handler | its message stays hidden | a heartbeat extends visibility ([`lease`]) |
//! | a parked message | `shop-inventory-dlq` | a copy with every diagnostic, then the original deleted |
//! | a message SQS moved itself | `shop-inventory-dlq` | described by `x-dead-letter-*` and its last error ([`dead_letter`]) |
//! | a redrive | `shop-inventory`, same id | `Route::Consumer` |
//!
//! ```
//! use postroom_sqs::TopologyConfig;
//!
//! let cfg = TopologyConfig::from_toml(r#"
//!     prefix = "shop"
//!     visibility_timeout = "30s"
//!     max_receive_count = 8
//!     [[consumers]]
//!     name = "inventory"
//!     bindings = ["order.*"]
//! "#).unwrap();
//! let names = cfg.names("inventory").unwrap();
//! assert_eq!((names.work.as_str(), names.dlq.as_str()), ("shop-inventory", "shop-inventory-dlq"));
//! ```
//!
//! Against an endpoint (see `tests/` for complete, running versions):
//!
//! ```no_run
//! # async fn demo() -> postroom_core::Result<()> {
//! use postroom_sqs::{SqsTransport, Topology, TopologyConfig, client};
//!
//! let sqs = client::from_env().await?; // AWS_REGION, credentials, AWS_ENDPOINT_URL…
//! let cfg = TopologyConfig::default().with_consumer("inventory", &["order.created"]);
//! let topology = Topology::new(sqs.clone(), cfg.clone())?;
//! for change in topology.plan().await? { println!("{change}"); } // dry run
//! topology.apply().await?;
//! let transport = SqsTransport::connect(sqs, cfg).await?;
//! // hand `transport` to postroom_core::Consumer::run_on, its publisher to the relay
//! # let _ = transport; Ok(()) }
//! ```

//! Tests run against a real endpoint: `bash scripts/services.sh sqs` installs and starts a
//! local one (moto's server on 127.0.0.1:5000); `POSTROOM_TEST_SQS` points the tests elsewhere,
//! with the region and credentials of the AWS environment.

pub mod attempt;
pub mod backlog;
pub mod client;
pub mod codec;
pub mod config;
pub mod dead_letter;
mod deleter;
pub mod delivery;
#[cfg(feature = "driver")]
pub mod driver;
pub mod error;
pub mod lease;
pub mod naming;
pub mod publisher;
pub mod routes;
pub mod send;
pub mod stats;
pub mod subscriber;
pub mod topology;
pub mod transport;

/// The AWS SDK this crate is built on, for callers that configure a client or make calls of
/// their own.
pub use aws_sdk_sqs;
pub use config::{ConsumerTopology, TopologyConfig};
pub use delivery::SqsDelivery;
pub use naming::QueueNames;
pub use publisher::SqsPublisher;
pub use routes::{ConsumerQueues, Routes};
pub use stats::SqsStats;
pub use subscriber::SqsSubscriber;
pub use topology::{Change, Topology};
pub use transport::SqsTransport;
