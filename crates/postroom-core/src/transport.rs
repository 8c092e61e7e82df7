//! Transport traits: a confirming publisher, a subscriber, and a delivery that can be acked,
//! retried after a delay, or parked. A failed act hands the delivery back: nothing is dropped.

use crate::error::{Error, Result};
use crate::message::{Headers, OutgoingMessage};
use crate::outcome::RetryPlan;
use crate::parking::ParkedMessage;
use async_trait::async_trait;
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

/// A message received from a transport, not yet settled.
#[derive(Clone, Debug)]
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
}

impl ReceivedMessage {
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

    /// Publish a copy with the same id and `x-retry-attempt = plan.attempt` to the delay stage,
    /// wait for its confirmation, and only then acknowledge this delivery (R9).
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
    async fn next(&mut self, max_wait: Duration) -> Result<Option<Self::Delivery>>;
}

/// Backlog figures of a queue (R15): ready count and the age of the oldest ready message.
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
/// unacked, delayed, and the age of the oldest ready message (R15).
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
