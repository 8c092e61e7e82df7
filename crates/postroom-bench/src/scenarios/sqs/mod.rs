//! Amazon SQS (the endpoint of `POSTROOM_TEST_SQS`): the relay beside a raw
//! `SendMessageBatch` loop, and the consumer with its inbox beside a raw receive +
//! transaction + `DeleteMessageBatch` loop, on the same endpoint in the same run.

pub mod consumer;
pub mod relay;

use crate::error::Context;
use crate::report::Measurement;
use crate::{BenchError, Ctx};
use postroom_sqs::aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use postroom_sqs::error::sdk;

/// Both measurements.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    Ok(vec![relay::run(ctx).await?, consumer::run(ctx).await?])
}

/// Send one raw batch `call` (`SendMessageBatch`, `DeleteMessageBatch`): an error unless the
/// call succeeded and none of its entries failed (`failed` counts them in its output).
async fn send_batch<O, E>(
    call: &str,
    sent: impl Future<Output = Result<O, SdkError<E>>>,
    failed: impl FnOnce(&O) -> usize,
) -> Result<(), BenchError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let out = sent
        .await
        .map_err(|e| sdk(format!("raw {call}"), e))
        .ctx("SQS")?;
    match failed(&out) {
        0 => Ok(()),
        n => Err(BenchError::Stalled(format!(
            "raw {call}: {n} entries failed"
        ))),
    }
}
