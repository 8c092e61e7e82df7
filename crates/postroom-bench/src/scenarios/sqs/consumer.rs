//! SQS consumer with inbox: SQS → handler → inbox row + business update in one PostgreSQL
//! transaction → delete, postroom's `Consumer` on its SQS subscriber (long polling, batched
//! deletes after the commit, visibility heartbeats) beside a raw loop: as many tasks as the
//! consumer's concurrency, each `ReceiveMessage` (ten at a time), the same transaction per
//! message, then `DeleteMessageBatch`. Target ≥ 0.8.

use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::pg::EFFECT_SQL;
use crate::resources::rabbit::{BINDING, CONSUMER};
use crate::resources::sqs::SqsWorkload;
use crate::scenarios::handler::{InboxHandler, Progress, timed_consumer};
use crate::scenarios::rate;
use crate::{Ctx, PG_FSYNC_NOTE};
use postroom_core::{Envelope, Subscription, Transport};
use postroom_sqs::aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use postroom_sqs::error::sdk;
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let (n, conc, prefetch) = (a.messages(), usize::from(a.concurrency), a.prefetch);
    let pool = ctx
        .db()?
        .store(u32::from(a.concurrency))
        .await?
        .pool()
        .clone();
    let (ours, raw) = crate::scenarios::alternate(
        a.rounds(),
        async || {
            let w = SqsWorkload::create("consumer").await?;
            fill(&w, n, a.payload_bytes).await?;
            let progress = Arc::new(Progress::default());
            let handler = Arc::new(InboxHandler::new(pool.clone(), progress.clone()));
            let sub = w
                .transport
                .subscribe(&Subscription::new(CONSUMER, &[BINDING]).prefetch(usize::from(prefetch)))
                .await
                .ctx("SQS subscriber")?;
            let r = timed_consumer(handler, conc, sub, &progress, n, "postroom SQS consumer").await;
            w.delete().await?;
            r
        },
        async || {
            let w = SqsWorkload::create("consumer").await?;
            fill(&w, n, a.payload_bytes).await?;
            let r = raw_round(&w, &pool, n, conc).await;
            w.delete().await?;
            r
        },
    )
    .await?;
    pool.close().await;
    Ok(Measurement::new(
        "consumer_inbox_sqs",
        "sqs",
        "msg/s",
        median(&ours),
        median(&raw),
        "raw ReceiveMessage + sqlx transaction + DeleteMessageBatch, same concurrency",
        Target::at_least(0.8),
        Load::new(a.payload_bytes, conc, usize::from(prefetch), 1, n),
    )
    .detail("postroom_rounds", &ours)
    .detail("raw_rounds", &raw)
    .note(PG_FSYNC_NOTE))
}

/// Put `n` fresh messages (new ids) into the work queue, through postroom's publisher (so
/// both sides read the same encoding).
async fn fill(w: &SqsWorkload, n: usize, bytes: usize) -> Result<(), BenchError> {
    let publisher = w.transport.publisher();
    for chunk in payload::outgoing(0, n, bytes).chunks(100) {
        for r in publisher.publish_batch(chunk).await {
            r.ctx("filling the SQS queue")?;
        }
    }
    Ok(())
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
            let env: Envelope = serde_json::from_str(m.body().unwrap_or_default())
                .map_err(|e| BenchError::Config(format!("raw decode: {e}")))?;
            let mut tx = pool.begin().await.ctx("raw begin")?;
            let fresh = sqlx::query(
                "INSERT INTO raw_inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
            .bind(CONSUMER)
            .bind(env.id.as_uuid())
            .execute(&mut *tx)
            .await
            .ctx("raw inbox")?
            .rows_affected()
                == 1;
            if fresh {
                sqlx::query(EFFECT_SQL)
                    .bind(&env.aggregate.id)
                    .execute(&mut *tx)
                    .await
                    .ctx("raw effect")?;
            }
            tx.commit().await.ctx("raw commit")?;
            delete = delete.entries(
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("d{i}"))
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .map_err(|e| BenchError::Config(format!("raw delete entry: {e}")))?,
            );
        }
        if !received.is_empty() {
            let out = delete
                .send()
                .await
                .map_err(|e| sdk("raw DeleteMessageBatch", e))
                .ctx("SQS")?;
            if !out.failed().is_empty() {
                return Err(BenchError::Stalled(format!(
                    "raw DeleteMessageBatch: {} entries failed",
                    out.failed().len()
                )));
            }
            done.fetch_add(received.len(), Ordering::SeqCst);
        }
    }
    Ok(())
}

async fn raw_round(
    w: &SqsWorkload,
    pool: &PgPool,
    n: usize,
    conc: usize,
) -> Result<f64, BenchError> {
    let done = AtomicUsize::new(0);
    let deadline = Instant::now() + crate::scenarios::consumer::timeout(n);
    let started = Instant::now();
    let results =
        futures::future::join_all((0..conc).map(|_| raw_worker(w, pool, n, &done, deadline))).await;
    let per_sec = rate(n, started.elapsed());
    for r in results {
        r?;
    }
    Ok(per_sec)
}
