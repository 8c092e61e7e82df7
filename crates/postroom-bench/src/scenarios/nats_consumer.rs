//! NATS consumer with inbox: JetStream → handler → inbox row + business update in one
//! PostgreSQL transaction → ack confirmed by the server, postroom's `Consumer` on its NATS
//! subscriber beside the same work run raw (an async-nats pull of the same durable, the same
//! transaction, a double ack) at the same concurrency and prefetch. Target ≥ 80 %.
//! The scenario itself is [`broker::consumer`](super::broker::consumer); here is NATS's part.

use super::broker::Figure;
use super::broker::consumer::{Clock, ConsumerLoad, RawConsumer};
use super::broker::raw_inbox::timed_per_delivery;
use crate::Ctx;
use crate::error::BenchError;
use crate::payload::ROUTING_KEY;
use crate::report::Measurement;
use crate::resources::nats::NatsWorkload;
use async_nats::jetstream::Message;
use futures::StreamExt;
use postroom_core::{OutgoingMessage, async_trait};
use sqlx::PgPool;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let figure = Figure {
        name: "consumer_inbox_pg_nats",
        group: "nats-consumer",
        baseline: "raw async-nats pull of the consumer's durable + sqlx transaction + double ack, same concurrency",
        // A pull request a finished round left on the server can never take the next
        // round's messages.
        fresh_per_round: true,
    };
    super::broker::consumer::run::<NatsWorkload>(ctx, figure, Clock::AtStart).await
}

#[async_trait]
impl RawConsumer for NatsWorkload {
    async fn fill(&self, messages: &[OutgoingMessage], _prefetch: u16) -> Result<(), BenchError> {
        self.raw_publish(messages, 500).await
    }

    const BINDING: &'static str = ROUTING_KEY;

    /// A raw pull of the consumer's durable, `prefetch` a batch; each message double-acked
    /// after its commit.
    async fn raw_round(&self, pool: &PgPool, load: &ConsumerLoad) -> Result<f64, BenchError> {
        let consumer = self.raw_consumer().await?;
        let stream = consumer
            .stream()
            .max_messages_per_batch(usize::from(load.prefetch))
            .messages()
            .await
            .map_err(|e| BenchError::Stalled(format!("raw pull: {e}")))?;
        timed_per_delivery(
            pool,
            load.n,
            load.concurrency,
            stream.map(|m| m.map_err(|e| BenchError::Stalled(format!("raw NATS delivery: {e}")))),
            |m: &Message| &m.payload,
            |m: Message| async move {
                m.double_ack()
                    .await
                    .map_err(|e| BenchError::Stalled(format!("raw ack: {e}")))
            },
        )
        .await
    }
}
