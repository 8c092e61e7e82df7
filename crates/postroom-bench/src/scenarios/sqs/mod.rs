//! Amazon SQS (the endpoint of `POSTROOM_TEST_SQS`): the relay beside a raw
//! `SendMessageBatch` loop, and the consumer with its inbox beside a raw receive +
//! transaction + `DeleteMessageBatch` loop, on the same endpoint in the same run.

pub mod consumer;
pub mod relay;

use crate::report::Measurement;
use crate::{BenchError, Ctx};

/// Both measurements.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    Ok(vec![relay::run(ctx).await?, consumer::run(ctx).await?])
}
