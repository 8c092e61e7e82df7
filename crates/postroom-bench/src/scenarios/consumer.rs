//! Scenario 2, consumer with inbox: RabbitMQ → handler → inbox row + business update in one
//! PostgreSQL transaction → ack, postroom's `Consumer` on its RabbitMQ subscriber beside the
//! same transaction run raw (lapin consume + sqlx transaction + ack) at the same concurrency
//! and prefetch. Target ≥ 80 %.

use super::handler::{InboxHandler, Progress, timed_consumer};
use super::rate;
use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::pg::EFFECT_SQL;
use crate::resources::rabbit::{CONSUMER, Workload};
use crate::{Ctx, PG_FSYNC_NOTE};
use futures::StreamExt;
use lapin::options::BasicAckOptions;
use postroom_core::Envelope;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let (n, conc, prefetch) = (a.messages(), usize::from(a.concurrency), a.prefetch);
    let w = Workload::create(&ctx.endpoints, "consumer", "5s").await?;
    let pool = ctx
        .db()?
        .store(u32::from(a.concurrency))
        .await?
        .pool()
        .clone();
    let (ours, raw) = super::alternate(
        a.rounds(),
        async || {
            fill_queue(&w, n, a.payload_bytes).await?;
            postroom_round(&w, &pool, n, conc, prefetch).await
        },
        async || {
            fill_queue(&w, n, a.payload_bytes).await?;
            raw_round(&w, &pool, n, conc, prefetch).await
        },
    )
    .await?;
    pool.close().await;
    w.delete().await?;
    let load = Load::new(a.payload_bytes, conc, usize::from(prefetch), 1, n);
    Ok(Measurement::new(
        "consumer_inbox_pg",
        "consumer",
        "msg/s",
        median(&ours),
        median(&raw),
        "raw lapin consume + sqlx transaction + ack, same concurrency",
        Target::at_least(0.8),
        load,
    )
    .detail("postroom_rounds", &ours)
    .detail("raw_rounds", &raw)
    .note(PG_FSYNC_NOTE))
}

/// Put `n` fresh messages (new ids) into the work queue.
pub async fn fill_queue(w: &Workload, n: usize, bytes: usize) -> Result<(), BenchError> {
    let msgs = payload::outgoing(0, n, bytes);
    let ch = w.raw_confirm_channel().await?;
    w.raw_publish(&ch, &msgs, 500).await?;
    let _ = ch.close(200, "filled").await;
    Ok(())
}

/// Time postroom's consumer until it handled and acked `n` messages.
async fn postroom_round(
    w: &Workload,
    pool: &PgPool,
    n: usize,
    conc: usize,
    prefetch: u16,
) -> Result<f64, BenchError> {
    let progress = Arc::new(Progress::default());
    let handler = Arc::new(InboxHandler::new(pool.clone(), progress.clone()));
    let sub = w.subscriber(prefetch)?;
    timed_consumer(handler, conc, sub, &progress, n, "postroom consumer").await
}

/// Time the raw loop until it handled and acked `n` messages.
async fn raw_round(
    w: &Workload,
    pool: &PgPool,
    n: usize,
    conc: usize,
    prefetch: u16,
) -> Result<f64, BenchError> {
    let (ch, mut stream) = w.raw_consumer(prefetch, "raw-bench").await?;
    let permits = Arc::new(Semaphore::new(conc));
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout(n);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let permit = permits.clone().acquire_owned().await.expect("open");
        let d = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| BenchError::Stalled("raw consumer stalled".into()))?
            .ok_or_else(|| BenchError::Stalled("raw consumer cancelled".into()))?
            .ctx("raw delivery")?;
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let env: Envelope = serde_json::from_slice(&d.data)
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
            d.acker
                .ack(BasicAckOptions::default())
                .await
                .ctx("raw ack")?;
            drop(permit);
            Ok::<_, BenchError>(())
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("raw task: {e}")))??;
    }
    let per_sec = rate(n, started.elapsed());
    let _ = ch.close(200, "done").await;
    Ok(per_sec)
}

/// A generous limit for handling `n` messages.
#[must_use]
pub fn timeout(n: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(n as u64 * 5)
}
