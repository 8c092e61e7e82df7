//! Relay to Kafka: postroom's `OutboxRelay` from the PostgreSQL outbox to a Kafka topic through
//! the idempotent, confirming producer, beside a raw rdkafka producer loop of the same settings
//! publishing the same payloads to the same topic, a window of `--batch` records in flight
//! (the relay's batch), each record's delivery report waited for. Target ≥ 90 %.
//! The scenario itself is [`broker::relay`](super::broker::relay); here is Kafka's part.

use super::broker::Figure;
use super::broker::relay::{RawRelay, RelayLoad};
use crate::Ctx;
use crate::error::BenchError;
use crate::payload;
use crate::report::Measurement;
use crate::resources::kafka::Workload;
use postroom_core::{OutgoingMessage, async_trait};
use rdkafka::producer::FutureProducer;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let figure = Figure {
        name: "relay_pg_to_kafka",
        group: "relay",
        baseline: "raw rdkafka idempotent producer loop, same topic, a batch in flight, no database",
        fresh_per_round: false,
    };
    Ok(vec![
        super::broker::relay::run::<Workload>(ctx, figure).await?,
    ])
}

/// One raw producer per relay.
#[async_trait]
impl RawRelay for Workload {
    type Sender = FutureProducer;

    async fn raw_senders(&self, load: &RelayLoad) -> Result<Vec<FutureProducer>, BenchError> {
        let producers = (0..load.relays)
            .map(|_| self.raw_producer())
            .collect::<Result<Vec<_>, _>>()?;
        // Connected (and given a producer id) before the clock starts, like postroom's producer.
        for p in &producers {
            self.raw_publish(p, &payload::messages(load.n, 1, load.bytes), 1)
                .await?;
        }
        Ok(producers)
    }

    async fn raw_send(
        &self,
        producer: &FutureProducer,
        part: &[OutgoingMessage],
        window: usize,
    ) -> Result<(), BenchError> {
        self.raw_publish(producer, part, window).await
    }

    /// Every message was acknowledged by the broker (postroom's: the delivery reports its
    /// publisher counted; the raw loop fails on any report that is not an acknowledgement);
    /// the topic's end offset is no witness on the test broker, which reports it short of
    /// what it acknowledged after batched produce requests.
    async fn check_arrived(&self, n: usize, confirmed: Option<usize>) -> Result<(), BenchError> {
        match confirmed {
            Some(confirmed) if confirmed != n => Err(BenchError::Stalled(format!(
                "{confirmed} of {n} messages were acknowledged"
            ))),
            _ => Ok(()),
        }
    }
}
