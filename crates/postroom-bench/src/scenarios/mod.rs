//! The scenarios, one per file, each measured beside its baseline.

pub mod consumer;
pub mod consumer_batched;
pub mod embedded_consumer;
pub mod embedded_relay;
pub mod handler;
pub mod hot_loop;
pub mod latency;
pub mod memory;
pub mod relay;
pub mod retry;
pub mod timed;

use crate::args::Scenario;
use crate::report::Measurement;
use crate::{BenchError, Ctx};

/// Run one scenario group.
pub async fn run(ctx: &Ctx, s: Scenario) -> Result<Vec<Measurement>, BenchError> {
    match s {
        Scenario::Relay => relay::run(ctx).await,
        Scenario::Consumer => {
            let per_message = consumer::run(ctx).await?;
            let batched = consumer_batched::run(ctx, per_message.postroom).await?;
            Ok(vec![per_message, batched])
        }
        Scenario::Embedded => Ok(vec![
            embedded_relay::run(ctx).await?,
            embedded_consumer::run(ctx).await?,
        ]),
        Scenario::Latency => Ok(vec![latency::run(ctx).await?]),
        Scenario::Retry => Ok(vec![retry::run(ctx).await?]),
        Scenario::HotLoop => hot_loop::run(ctx).await,
        Scenario::Memory => memory::run(ctx).await,
    }
}

/// `n` messages over `elapsed` seconds.
#[must_use]
pub fn rate(n: usize, elapsed: std::time::Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}
