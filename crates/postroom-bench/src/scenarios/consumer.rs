//! Scenario 2, consumer with inbox: RabbitMQ → handler → inbox row + business update in one
//! PostgreSQL transaction → ack, postroom's `Consumer` on its RabbitMQ subscriber beside the
//! same transaction run raw (lapin consume + sqlx transaction + ack) at the same concurrency
//! and prefetch. Target ≥ 80 %. The scenario itself is
//! [`broker::consumer`](super::broker::consumer); here is RabbitMQ's part.

use super::broker::Figure;
use super::broker::consumer::{Clock, ConsumerLoad, RawConsumer};
use super::broker::raw_inbox::timed_per_delivery;
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::payload;
use crate::report::Measurement;
use crate::resources::rabbit::{BINDING, Workload};
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::BasicAckOptions;
use postroom_core::{OutgoingMessage, async_trait};
use sqlx::PgPool;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let figure = Figure {
        name: "consumer_inbox_pg",
        group: "consumer",
        baseline: "raw lapin consume + sqlx transaction + ack, same concurrency",
        fresh_per_round: false,
    };
    super::broker::consumer::run::<Workload>(ctx, figure, Clock::AtStart).await
}

/// Put `n` fresh messages (new ids) into the work queue.
pub async fn fill_queue(w: &Workload, n: usize, bytes: usize) -> Result<(), BenchError> {
    publish_to_queue(w, &payload::messages(0, n, bytes)).await
}

/// Publish `msgs` through the work exchange on a raw confirm channel, 500 in flight.
async fn publish_to_queue(w: &Workload, msgs: &[OutgoingMessage]) -> Result<(), BenchError> {
    let ch = w.raw_confirm_channel().await?;
    w.raw_publish(&ch, msgs, 500).await?;
    let _ = ch.close(200, "filled").await;
    Ok(())
}

#[async_trait]
impl RawConsumer for Workload {
    async fn fill(&self, messages: &[OutgoingMessage], _prefetch: u16) -> Result<(), BenchError> {
        publish_to_queue(self, messages).await
    }

    const BINDING: &'static str = BINDING;

    /// A raw lapin consumer of the work queue; each delivery acked after its commit.
    async fn raw_round(&self, pool: &PgPool, load: &ConsumerLoad) -> Result<f64, BenchError> {
        let (ch, stream) = self.raw_consumer(load.prefetch, "raw-bench").await?;
        let per_sec =
            timed_per_delivery(
                pool,
                load.n,
                load.concurrency,
                stream.map(|d| d.ctx("raw delivery")),
                |d: &Delivery| &d.data,
                |d: Delivery| async move {
                    d.acker.ack(BasicAckOptions::default()).await.ctx("raw ack")
                },
            )
            .await;
        let _ = ch.close(200, "done").await;
        per_sec
    }
}
