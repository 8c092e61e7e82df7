//! A backend is a store half and a transport half.
//!
//! The store half ([`StoreFixture`]) holds the outbox, the parking store, the inbox and a
//! counted business effect; the transport half ([`TransportFixture`]) is any
//! [`Transport`]. A broker's tests pair its transport with one of the ready store halves
//! ([`crate::stores`]) instead of writing a store again. [`Backend`] runs the parking ingest
//! for every consumer it subscribes, so copies a broker dead-letters reach the parking store
//! the way they do in production.

use async_trait::async_trait;
use postroom_core::parking::ParkingIngest;
use postroom_core::{
    BoxSubscriber, Envelope, Handled, MessageId, OutboxStore, ParkingStore, Publisher, Result,
    RetryLadder, Subscription, Transport,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The store half: outbox, parking store, inbox and a counted business effect.
#[async_trait]
pub trait StoreFixture: Send + Sync + 'static {
    /// In one transaction: write an `orders` business row keyed by the envelope's aggregate
    /// id and the outbox row for `envelope` to `topic`.
    async fn produce(&self, envelope: &Envelope, topic: &str) -> Result<()>;

    /// The outbox store.
    fn outbox(&self) -> Arc<dyn OutboxStore>;

    /// The parking store.
    fn parking(&self) -> Arc<dyn ParkingStore>;

    /// In one transaction: claim the inbox row `(consumer, id)` and, if it was new, add one
    /// effect under `key`; commit. `Duplicate` when the inbox already held the id.
    async fn apply_effect(&self, consumer: &str, id: MessageId, key: &str) -> Result<Handled>;

    /// In one transaction: claim the inbox rows of all `items` in one statement and add one
    /// effect under the key of each new id; commit. One result per item, in order:
    /// `Applied` or `Duplicate`.
    async fn apply_effects(
        &self,
        consumer: &str,
        items: &[(MessageId, String)],
    ) -> Result<Vec<Handled>>;

    /// Effects committed under `key` for `consumer`.
    async fn effect_count(&self, consumer: &str, key: &str) -> Result<u64>;
}

/// The transport half: a transport and what the suite needs to know of it.
#[derive(Clone)]
pub struct TransportFixture {
    /// The transport.
    pub transport: Arc<dyn Transport>,
    /// Delays the suite's retry ladder uses (the transport must keep them).
    pub ladder: RetryLadder,
    /// How long after a consumer dies its unsettled deliveries come back (lease, visibility
    /// timeout, ack wait; a closed channel at once); the suite waits up to three times this.
    pub redelivery_after: Duration,
    /// Prefetch of the suite's subscriptions.
    pub prefetch: usize,
}

/// Facts about a backend that change what the suite can demand.
#[derive(Clone, Debug)]
pub struct BackendCaps {
    /// Delays the suite's ladder uses.
    pub ladder: RetryLadder,
    /// See [`TransportFixture::redelivery_after`].
    pub redelivery_after: Duration,
}

/// A fresh, isolated store + transport, built per test.
pub struct Backend {
    store: Arc<dyn StoreFixture>,
    transport: TransportFixture,
    ingesting: Mutex<HashSet<String>>,
    stop_ingest: watch::Sender<bool>,
    /// Things that must live as long as the backend (temporary directories, databases,
    /// broker prefixes cleaned up on drop); dropped after the rest.
    _keep: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.stop_ingest.send(true);
    }
}

impl Backend {
    /// A backend of these two halves.
    pub fn new(store: Arc<dyn StoreFixture>, transport: TransportFixture) -> Self {
        let (stop_ingest, _) = watch::channel(false);
        Self {
            store,
            transport,
            ingesting: Mutex::new(HashSet::new()),
            stop_ingest,
            _keep: Vec::new(),
        }
    }

    /// A broker's transport with a fresh SQLite store as the store half, the way the brokers'
    /// tests pair them: the suite's ladder `ladder` (the transport must keep its stages),
    /// deliveries of a dead consumer back after `redelivery_after`, a prefetch of 2.
    #[cfg(feature = "sqlite")]
    pub async fn on_sqlite(
        transport: Arc<dyn Transport>,
        ladder: &str,
        redelivery_after: Duration,
    ) -> Self {
        Self::new(
            Arc::new(crate::stores::sqlite::SqliteFixture::fresh().await),
            TransportFixture {
                transport,
                ladder: ladder.parse().expect("ladder"),
                redelivery_after,
                prefetch: 2,
            },
        )
    }

    /// A store whose table queue (in the same database, rows leased for `lease`) is also the
    /// transport, the way the stores' own suites run: the suite's ladder `ladder`, deliveries
    /// of a dead consumer back once the lease runs out, a prefetch of 1.
    pub fn on_own_queue(
        store: Arc<dyn StoreFixture>,
        queue: Arc<dyn Transport>,
        ladder: &str,
        lease: Duration,
    ) -> Self {
        Self::new(
            store,
            TransportFixture {
                transport: queue,
                ladder: ladder.parse().expect("ladder"),
                redelivery_after: lease,
                prefetch: 1,
            },
        )
    }

    /// Keep `guard` alive as long as the backend.
    #[must_use]
    pub fn keeping(mut self, guard: impl std::any::Any + Send + Sync) -> Self {
        self._keep.push(Box::new(guard));
        self
    }

    /// Capabilities.
    pub fn caps(&self) -> BackendCaps {
        BackendCaps {
            ladder: self.transport.ladder.clone(),
            redelivery_after: self.transport.redelivery_after,
        }
    }

    /// The transport.
    pub fn transport(&self) -> Arc<dyn Transport> {
        self.transport.transport.clone()
    }

    /// The store half.
    pub fn store(&self) -> Arc<dyn StoreFixture> {
        self.store.clone()
    }

    /// See [`StoreFixture::produce`].
    pub async fn produce(&self, envelope: &Envelope, topic: &str) -> Result<()> {
        self.store.produce(envelope, topic).await
    }

    /// The outbox store.
    pub fn outbox(&self) -> Arc<dyn OutboxStore> {
        self.store.outbox()
    }

    /// The parking store.
    pub fn parking(&self) -> Arc<dyn ParkingStore> {
        self.store.parking()
    }

    /// The transport's confirming publisher.
    pub fn publisher(&self) -> Arc<dyn Publisher> {
        self.transport.transport.publisher()
    }

    /// Subscribe `consumer` to `topics` (the transport declares what it needs), and start the
    /// parking ingest of its dead-letter place once. Subscribing again after dropping the
    /// previous subscriber is a consumer restart.
    pub async fn subscribe(&self, consumer: &str, topics: &[&str]) -> Result<BoxSubscriber> {
        self.subscribe_with_prefetch(consumer, topics, self.transport.prefetch)
            .await
    }

    /// [`Backend::subscribe`] with a prefetch of `prefetch` instead of the fixture's (a
    /// batched consumer needs room in flight for its batches to form).
    pub async fn subscribe_with_prefetch(
        &self,
        consumer: &str,
        topics: &[&str],
        prefetch: usize,
    ) -> Result<BoxSubscriber> {
        let sub = Subscription::new(consumer, topics).prefetch(prefetch);
        let subscriber = self.transport.transport.subscribe(&sub).await?;
        let first = self
            .ingesting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(consumer.to_string());
        if first {
            let ingest = ParkingIngest::new(consumer, self.store.parking());
            let transport = self.transport.transport.clone();
            let stop = self.stop_ingest.subscribe();
            tokio::spawn(async move { ingest.run(transport.as_ref(), stop).await });
        }
        Ok(subscriber)
    }

    /// See [`StoreFixture::apply_effect`].
    pub async fn apply_effect(&self, consumer: &str, id: MessageId, key: &str) -> Result<Handled> {
        self.store.apply_effect(consumer, id, key).await
    }

    /// See [`StoreFixture::apply_effects`].
    pub async fn apply_effects(
        &self,
        consumer: &str,
        items: &[(MessageId, String)],
    ) -> Result<Vec<Handled>> {
        self.store.apply_effects(consumer, items).await
    }

    /// See [`StoreFixture::effect_count`].
    pub async fn effect_count(&self, consumer: &str, key: &str) -> Result<u64> {
        self.store.effect_count(consumer, key).await
    }
}
