//! What a store + transport pair offers the conformance suite.

use async_trait::async_trait;
use postroom_core::{
    Envelope, Handled, MessageId, OutboxStore, ParkingStore, Publisher, Result, RetryLadder,
    Subscriber,
};
use std::sync::Arc;
use std::time::Duration;

/// Facts about a backend that change what the suite can demand.
#[derive(Clone, Debug)]
pub struct BackendCaps {
    /// Delays the transport can keep (its retry stages). The suite builds its ladder from
    /// these; a broker with fixed-TTL stage queues declares them here.
    pub ladder: RetryLadder,
    /// How long after a consumer dies its unacked deliveries come back (lease / visibility
    /// timeout); the suite waits up to three times this.
    pub redelivery_after: Duration,
}

/// A fresh, isolated store + transport, built per test.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The subscriber type.
    type Sub: Subscriber;

    /// Capabilities.
    fn caps(&self) -> BackendCaps;

    /// In one transaction: write an `orders` business row keyed by the envelope's aggregate id
    /// and the outbox row for `envelope` to `topic` (R2).
    async fn produce(&self, envelope: &Envelope, topic: &str) -> Result<()>;

    /// The outbox store.
    fn outbox(&self) -> Arc<dyn OutboxStore>;

    /// The parking store.
    fn parking(&self) -> Arc<dyn ParkingStore>;

    /// A confirming publisher on the transport.
    fn publisher(&self) -> Arc<dyn Publisher>;

    /// Subscribe `consumer` to `topics`, declaring whatever the transport needs (queues, retry
    /// stages from `caps().ladder`, parking). Subscribing again after dropping the previous
    /// subscriber simulates a consumer restart.
    async fn subscribe(&self, consumer: &str, topics: &[&str]) -> Result<Self::Sub>;

    /// In one transaction: claim the inbox row `(consumer, id)` and, if it was new, add one
    /// effect under `key`; commit. `Duplicate` when the inbox already held the id.
    async fn apply_effect(&self, consumer: &str, id: MessageId, key: &str) -> Result<Handled>;

    /// Effects committed under `key` for `consumer`.
    async fn effect_count(&self, consumer: &str, key: &str) -> Result<u64>;
}
