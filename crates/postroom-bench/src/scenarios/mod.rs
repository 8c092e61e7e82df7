//! The scenarios, one per file, each measured beside its baseline.

pub mod broker;
pub mod consumer;
pub mod consumer_batched;
pub mod e2e;
pub mod embedded_consumer;
pub mod embedded_relay;
pub mod handler;
pub mod hot_loop;
pub mod kafka_consumer;
pub mod kafka_relay;
pub mod latency;
pub mod memory;
pub mod nats_consumer;
pub mod nats_relay;
pub mod pg_store;
pub mod relay;
pub mod retry;
pub mod scheduled;
pub mod sqs;
pub mod timed;
pub mod wal_relay;

use crate::args::Scenario;
use crate::report::Measurement;
use crate::{BenchError, Ctx};

/// Run one scenario group.
pub async fn run(ctx: &Ctx, s: Scenario) -> Result<Vec<Measurement>, BenchError> {
    match s {
        Scenario::Relay => relay::run(ctx).await,
        Scenario::RelayNoAggregate => relay::run_unordered(ctx).await,
        Scenario::Consumer => {
            let per_message = consumer::run(ctx).await?;
            let batched = consumer_batched::run(ctx, per_message.postroom).await?;
            Ok(vec![per_message, batched])
        }
        Scenario::Embedded => Ok(vec![
            embedded_relay::run(ctx).await?,
            embedded_consumer::run(ctx).await?,
        ]),
        Scenario::Latency => latency::run(ctx).await,
        Scenario::Retry => Ok(vec![retry::run(ctx).await?]),
        Scenario::Scheduled => Ok(vec![scheduled::run(ctx).await?]),
        Scenario::HotLoop => hot_loop::run(ctx).await,
        Scenario::Memory => memory::run(ctx).await,
        Scenario::PgRelay => pg_store::relay::run(ctx).await,
        Scenario::PgConsumer => pg_store::consumer::run(ctx).await,
        Scenario::PgProduce => pg_store::produce::run(ctx).await,
        Scenario::NatsRelay => nats_relay::run(ctx).await,
        Scenario::NatsConsumer => Ok(vec![nats_consumer::run(ctx).await?]),
        Scenario::Sqs => sqs::run(ctx).await,
        Scenario::KafkaRelay => kafka_relay::run(ctx).await,
        Scenario::KafkaConsumer => Ok(vec![kafka_consumer::run(ctx).await?]),
        Scenario::E2e => e2e::run(ctx).await,
        Scenario::WalRelay => wal_relay::run(ctx).await,
    }
}

/// `rounds` pairs of figures, alternating which side runs first (a side that always ran
/// second would always meet the caches the first one warmed).
pub async fn alternate<E>(
    rounds: usize,
    mut ours: impl AsyncFnMut() -> Result<f64, E>,
    mut raw: impl AsyncFnMut() -> Result<f64, E>,
) -> Result<(Vec<f64>, Vec<f64>), E> {
    let (mut a, mut b) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for round in 0..rounds {
        if round % 2 == 0 {
            a.push(ours().await?);
            b.push(raw().await?);
        } else {
            b.push(raw().await?);
            a.push(ours().await?);
        }
    }
    Ok((a, b))
}

/// `n` messages over `elapsed` seconds.
#[must_use]
pub fn rate(n: usize, elapsed: std::time::Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// A generous limit for handling `n` messages.
#[must_use]
pub fn timeout(n: usize) -> std::time::Duration {
    std::time::Duration::from_secs(60) + std::time::Duration::from_millis(n as u64 * 5)
}
