//! The consumer side: a poll thread per consumer group member, an offset tracker per
//! partition, retry copies held until due, rebalance callbacks that finish or abandon
//! in-flight work, per-key ordered retry chains, and the deliveries' settling acts.

mod chain;
pub mod context;
pub mod delivery;
mod ledger;
mod marks;
mod poller;
mod record;
mod state;
pub mod subscriber;
mod topics;

pub use delivery::KafkaDelivery;
pub use subscriber::{KafkaSubscriber, SubscriberSpec};
