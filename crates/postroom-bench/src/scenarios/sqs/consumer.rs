//! SQS consumer with inbox: SQS → handler → inbox row + business update in one PostgreSQL
//! transaction → delete, postroom's `Consumer` on its SQS subscriber (long polling, batched
//! deletes after the commit, visibility heartbeats) beside a raw loop: as many tasks as the
//! consumer's concurrency, each `ReceiveMessage` (ten at a time), the same transaction per
//! message, then `DeleteMessageBatch`. Target ≥ 0.8. The scenario itself is
//! [`broker::consumer`](crate::scenarios::broker::consumer); here is SQS's part.

use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::report::Measurement;
use crate::resources::rabbit::BINDING;
use crate::resources::sqs::SqsWorkload;
use crate::scenarios::broker::Figure;
use crate::scenarios::broker::consumer::{Clock, ConsumerLoad, RawConsumer};
use crate::scenarios::broker::raw_inbox::apply_body;
use crate::scenarios::{rate, timeout};
use postroom_core::{OutgoingMessage, Transport, async_trait};
use postroom_sqs::aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use postroom_sqs::error::sdk;
use sqlx::PgPool;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let figure = Figure {
        name: "consumer_inbox_sqs",
        group: "sqs",
        baseline: "raw ReceiveMessage + sqlx transaction + DeleteMessageBatch, same concurrency",
        // A queue is purged at most once a minute: queues of its own for every round.
        fresh_per_round: true,
    };
    crate::scenarios::broker::consumer::run::<SqsWorkload>(ctx, figure, Clock::AtStart).await
}

#[async_trait]
impl RawConsumer for SqsWorkload {
    /// Through postroom's publisher, 100 at a time (so both sides read the same encoding).
    async fn fill(&self, messages: &[OutgoingMessage], _prefetch: u16) -> Result<(), BenchError> {
        let publisher = self.transport.publisher();
        for chunk in messages.chunks(100) {
            for r in publisher.publish_batch(chunk).await {
                r.ctx("filling the SQS queue")?;
            }
        }
        Ok(())
    }

    const BINDING: &'static str = BINDING;

    /// `concurrency` raw workers sharing one count.
    async fn raw_round(&self, pool: &PgPool, load: &ConsumerLoad) -> Result<f64, BenchError> {
        let n = load.n;
        let done = AtomicUsize::new(0);
        let deadline = Instant::now() + timeout(n);
        let started = Instant::now();
        let results = futures::future::join_all(
            (0..load.concurrency).map(|_| raw_worker(self, pool, n, &done, deadline)),
        )
        .await;
        let per_sec = rate(n, started.elapsed());
        for r in results {
            r?;
        }
        Ok(per_sec)
    }
}

/// One raw worker: receive ten, run each message's transaction, delete the batch; until the
/// shared count reaches `n`.
async fn raw_worker(
    w: &SqsWorkload,
    pool: &PgPool,
    n: usize,
    done: &AtomicUsize,
    deadline: Instant,
) -> Result<(), BenchError> {
    while done.load(Ordering::SeqCst) < n {
        if Instant::now() > deadline {
            return Err(BenchError::Stalled(format!(
                "the raw SQS consumer handled {} of {n}",
                done.load(Ordering::SeqCst)
            )));
        }
        let out = w
            .client
            .receive_message()
            .queue_url(&w.work_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .map_err(|e| sdk("raw ReceiveMessage", e))
            .ctx("SQS")?;
        let mut delete = w.client.delete_message_batch().queue_url(&w.work_url);
        let received = out.messages();
        for (i, m) in received.iter().enumerate() {
            apply_body(pool, m.body().unwrap_or_default().as_bytes()).await?;
            delete = delete.entries(
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("d{i}"))
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .map_err(|e| BenchError::Config(format!("raw delete entry: {e}")))?,
            );
        }
        if !received.is_empty() {
            super::send_batch("DeleteMessageBatch", delete.send(), |out| {
                out.failed().len()
            })
            .await?;
            done.fetch_add(received.len(), Ordering::SeqCst);
        }
    }
    Ok(())
}
