//! # postroom-rabbitmq
//!
//! postroom on RabbitMQ.
#![allow(missing_docs)]

pub mod backlog;
pub mod config;
pub mod connection;
pub mod delivery;
pub mod error;
pub mod headers;
pub mod management;
pub mod naming;
pub mod parking;
pub mod publisher;
pub mod stats;
pub mod subscriber;
pub mod topology;

pub use backlog::RabbitBacklog;
pub use config::{ConsumerTopology, QueueType, RetryStyle, TopologyConfig};
pub use connection::{Broker, BrokerOptions};
pub use delivery::RabbitDelivery;
pub use management::ManagementApi;
pub use naming::ConsumerNames;
pub use parking::{ParkingIngest, ingest_parking};
pub use publisher::{ConfirmingPublisher, Outbound};
pub use subscriber::{RabbitSubscriber, SubscriberOptions};
pub use topology::{Change, Topology};
