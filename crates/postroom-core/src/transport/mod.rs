//! Transport traits: a confirming publisher, a subscriber, and a delivery that can be acked,
//! retried after a delay, or parked. A failed act hands the delivery back: nothing is dropped.
//!
//! [`Transport`] ties them together for one broker (or queue in tables): a publisher, named
//! consumers subscribed to routes, the place dead-lettered copies wait for the parking
//! ingest, backlog figures, and its [`Capabilities`]. Every broker crate implements it; the
//! consumer loop, the relay and the command line use nothing else.

pub mod boxed;
pub mod capabilities;
pub mod fan_out;
pub mod table_queue;
pub mod topology;

pub use boxed::{BoxDelivery, BoxSubscriber};
pub use capabilities::{Capabilities, DelayCapability, KeyOrdering, RedeliveryCounting};
pub use fan_out::{FanOutPublisher, PublishTarget};
pub use table_queue::QueueConfig;
pub use topology::{BrokerTopology, TopologyChange, refuse_conflicts};

use crate::error::{Error, ErrorKind, Result};
use crate::message::{Headers, OutgoingMessage};
use crate::outcome::RetryPlan;
use crate::parking::ParkedMessage;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// A publisher that returns only once the broker has confirmed the message (RabbitMQ confirm
/// with no basic.return, Kafka `acks=all`, JetStream PubAck, SQS send response).
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Publish one message and wait for its confirmation.
    async fn publish(&self, message: &OutgoingMessage) -> Result<()>;

    /// Publish many, with as many in flight as the transport allows; one result per message,
    /// in order. The default publishes one after another.
    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        let mut out = Vec::with_capacity(messages.len());
        for m in messages {
            out.push(self.publish(m).await);
        }
        out
    }
}

/// Publish one message through `publisher`'s batch path, for transports whose
/// [`Publisher::publish_batch`] is the real implementation; a batch with no result is an
/// I/O error.
pub async fn publish_via_batch<P: Publisher + ?Sized>(
    publisher: &P,
    message: &OutgoingMessage,
) -> Result<()> {
    publisher
        .publish_batch(std::slice::from_ref(message))
        .await
        .pop()
        .unwrap_or_else(|| Err(Error::new(ErrorKind::Io, "no result")))
}

/// A message received from a transport, not yet settled. Build it with
/// [`ReceivedMessage::new`]; fields may be added.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReceivedMessage {
    /// The stable id (from the transport's message id property).
    pub id: Option<crate::MessageId>,
    /// The routing key or topic it arrived with.
    pub routing_key: String,
    /// Headers.
    pub headers: Headers,
    /// Body bytes.
    pub body: Vec<u8>,
    /// The transport's redelivery hint. For diagnostics only, never for correctness.
    pub redelivered: bool,
    /// How many times the transport has delivered this copy, this delivery included (1 on
    /// the first), where it counts them (quorum `x-delivery-count` + 1, JetStream
    /// `num_delivered`, SQS `ApproximateReceiveCount`, the table queues' delivery count).
    /// Bounds crash loops; `None` where the transport does not count.
    pub deliveries: Option<u32>,
}

impl ReceivedMessage {
    /// A message with these parts, not redelivered, deliveries not counted.
    #[must_use]
    pub fn new(
        id: Option<crate::MessageId>,
        routing_key: impl Into<String>,
        headers: Headers,
        body: Vec<u8>,
    ) -> Self {
        Self {
            id,
            routing_key: routing_key.into(),
            headers,
            body,
            redelivered: false,
            deliveries: None,
        }
    }

    /// Set the redelivery hint.
    #[must_use]
    pub fn redelivered(mut self, redelivered: bool) -> Self {
        self.redelivered = redelivered;
        self
    }

    /// Set the delivery count (1 on the first delivery).
    #[must_use]
    pub fn deliveries(mut self, deliveries: u32) -> Self {
        self.deliveries = Some(deliveries);
        self
    }

    /// The id this copy is known by on every retry and park: the transport's message id;
    /// else the envelope id in the body; else an id derived from the body, the same on every
    /// delivery (a copy must never get a new random id).
    #[must_use]
    pub fn stable_id(&self) -> crate::MessageId {
        if let Some(id) = self.id {
            return id;
        }
        #[derive(serde::Deserialize)]
        struct IdOnly {
            id: crate::MessageId,
        }
        serde_json::from_slice::<IdOnly>(&self.body)
            .map(|e| e.id)
            .unwrap_or_else(|_| crate::MessageId::derived_from(&self.body))
    }

    /// The ordering key: the aggregate key header, when present.
    #[must_use]
    pub fn ordering_key(&self) -> Option<&str> {
        self.headers
            .get(crate::message::headers::AGGREGATE_KEY)
            .map(String::as_str)
    }

    /// Retries already made (`x-retry-attempt`).
    #[must_use]
    pub fn attempt(&self) -> u32 {
        crate::message::attempt_of(&self.headers)
    }
}

/// A delivery that failed to settle, handed back with the error so the caller can try again
/// or drop it knowingly (the broker then redelivers it).
pub type Handback<D> = (Error, D);

/// One delivery from a [`Subscriber`]. Every settling act consumes it; on failure it comes back.
#[async_trait]
pub trait Delivery: Send + Sized + 'static {
    /// The message.
    fn message(&self) -> &ReceivedMessage;

    /// Acknowledge: the effect is durable.
    async fn ack(self) -> std::result::Result<(), Handback<Self>>;

    /// Acknowledge several deliveries whose effects are durable; one result per delivery, in
    /// their order. A transport that can acknowledge a run of deliveries in one act (AMQP's
    /// `multiple` flag) does so where no other unsettled delivery lies inside the run; by
    /// default each is acknowledged on its own, all at once.
    async fn ack_all(batch: Vec<Self>) -> Vec<std::result::Result<(), Handback<Self>>> {
        futures::future::join_all(batch.into_iter().map(Self::ack)).await
    }

    /// Publish a copy with the same id and `x-retry-attempt = plan.attempt` to the delay stage,
    /// wait for its confirmation, and only then acknowledge this delivery.
    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>>;

    /// Move to the parking lot with its diagnostics, then acknowledge.
    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>>;
}

/// A stream of deliveries for one consumer.
#[async_trait]
pub trait Subscriber: Send + 'static {
    /// The delivery type.
    type Delivery: Delivery;

    /// The next delivery, waiting up to `max_wait`; `Ok(None)` when none arrived in time.
    ///
    /// Callers never cancel this future (no `select!` around it): a transport may be in the
    /// middle of a store transaction or a fetch, and it returns within `max_wait`.
    async fn next(&mut self, max_wait: Duration) -> Result<Option<Self::Delivery>>;

    /// Stop receiving: unsettled deliveries go back to the transport (an AMQP channel closed,
    /// a fetch abandoned). Called once the consumer's in-flight work has settled.
    async fn close(&mut self) {}
}

/// What a consumer subscribes to: its name (the work queue, durable consumer or group it
/// owns), the routes (topic patterns, AMQP style: `*` one word, `#` any number) it takes, and
/// how many unsettled deliveries it may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Subscription {
    /// Consumer name.
    pub consumer: String,
    /// Topic patterns.
    pub routes: Vec<String>,
    /// Unsettled deliveries the transport may hand out ahead (≥ 1; 0 would be unbounded).
    pub prefetch: usize,
}

impl Subscription {
    /// `consumer` on `routes`, with a prefetch of 8.
    #[must_use]
    pub fn new(consumer: impl Into<String>, routes: &[&str]) -> Self {
        Self {
            consumer: consumer.into(),
            routes: routes.iter().map(|r| (*r).to_string()).collect(),
            prefetch: 8,
        }
    }

    /// Set the prefetch.
    #[must_use]
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Refuse an empty name and a prefetch of 0.
    pub fn validate(&self) -> Result<()> {
        if self.consumer.is_empty() {
            return Err(Error::new(ErrorKind::Config, "the consumer name is empty"));
        }
        check_prefetch(self.prefetch)
    }

    /// The routes as string slices.
    #[must_use]
    pub fn route_refs(&self) -> Vec<&str> {
        self.routes.iter().map(String::as_str).collect()
    }
}

/// Refuse a prefetch of 0: a transport would take it as no bound on the unsettled deliveries
/// it hands out.
pub fn check_prefetch(prefetch: usize) -> Result<()> {
    if prefetch == 0 {
        return Err(Error::new(
            ErrorKind::Config,
            "prefetch must be at least 1 (0 would mean unbounded)",
        ));
    }
    Ok(())
}

/// One broker (or queue in tables) as postroom uses it.
///
/// Implemented by every transport crate; the consumer loop, the relay, the command line and
/// the console reach brokers through this trait alone.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Short name for logs and metrics labels: `sqlite`, `postgres`, `rabbitmq`, `kafka`,
    /// `nats`, `sqs`.
    fn name(&self) -> &'static str;

    /// What it can do.
    fn capabilities(&self) -> Capabilities;

    /// A confirming publisher (the relay's and producers'; consumers settle through their
    /// own).
    fn publisher(&self) -> Arc<dyn Publisher>;

    /// Make sure copies published to the subscription's routes are kept for its consumer
    /// (bindings, queues, durable consumers), without consuming. Idempotent.
    async fn bind(&self, subscription: &Subscription) -> Result<()>;

    /// Bind, then return the consumer's stream of deliveries, attached: once this returns,
    /// the transport knows the consumer (a program's readiness can rest on it).
    async fn subscribe(&self, subscription: &Subscription) -> Result<BoxSubscriber>;

    /// Where copies dead-lettered for `consumer` wait for the parking ingest (a parking
    /// queue, topic or stream, a DLQ); `None` when parking writes straight into the parking
    /// store (the table queues).
    async fn dead_letters(&self, consumer: &str) -> Result<Option<BoxSubscriber>>;

    /// Backlog figures of `consumer`.
    async fn backlog(&self, consumer: &str) -> Result<Backlog>;

    /// Close connections (graceful shutdown: unsettled deliveries go back).
    async fn close(&self) {}
}

/// Compile-time check that [`Transport`] stays object safe.
#[allow(dead_code)]
fn _transport_is_object_safe(_: &dyn Transport) {}

/// Backlog figures of a queue: ready count and the age of the oldest ready message.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Backlog {
    /// Messages ready for delivery.
    pub ready: u64,
    /// Messages delivered and not yet settled.
    pub unacked: u64,
    /// Messages waiting in delay stages.
    pub delayed: u64,
    /// Age of the oldest ready message.
    pub oldest_ready_age: Option<Duration>,
}

/// Something that can report a consumer's backlog.
#[async_trait]
pub trait BacklogProbe: Send + Sync {
    /// Current backlog of `consumer`.
    async fn backlog(&self, consumer: &str) -> Result<Backlog>;
}

/// Record `consumer`'s backlog as gauges every `every` until `shutdown` turns true: ready,
/// unacked, delayed, and the age of the oldest ready message.
pub async fn report_backlog(
    probe: std::sync::Arc<dyn BacklogProbe>,
    consumer: String,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use crate::metrics as m;
    while !*shutdown.borrow() && shutdown.has_changed().is_ok() {
        match probe.backlog(&consumer).await {
            Ok(b) => {
                metrics::gauge!(m::READY, "consumer" => consumer.clone()).set(b.ready as f64);
                metrics::gauge!(m::UNACKED, "consumer" => consumer.clone()).set(b.unacked as f64);
                metrics::gauge!(m::DELAYED, "consumer" => consumer.clone()).set(b.delayed as f64);
                metrics::gauge!(m::OLDEST_READY_AGE, "consumer" => consumer.clone())
                    .set(b.oldest_ready_age.map_or(0.0, |d| d.as_secs_f64()));
            }
            Err(e) => tracing::debug!(consumer = %consumer, error = %e, "backlog probe failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => {}
        }
    }
}
