//! NATS consumer with inbox: JetStream → handler → inbox row + business update in one
//! PostgreSQL transaction → ack confirmed by the server, postroom's `Consumer` on its NATS
//! subscriber beside the same work run raw (an async-nats pull of the same durable, the same
//! transaction, a double ack) at the same concurrency and prefetch. Target ≥ 80 %.

use super::consumer::timeout;
use super::handler::{InboxHandler, Progress, timed_consumer};
use super::rate;
use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::nats::NatsWorkload;
use crate::resources::pg::EFFECT_SQL;
use crate::resources::rabbit::CONSUMER;
use crate::{Ctx, PG_FSYNC_NOTE};
use futures::StreamExt;
use postroom_core::Envelope;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

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
    // A workload of its own for every round: a pull request a finished round left on the
    // server can never take the next round's messages.
    let (ours, raw) = super::alternate(
        a.rounds(),
        async || {
            let w = filled(ctx, n, a.payload_bytes).await?;
            let r = postroom_round(&w, &pool, n, conc, prefetch).await;
            w.delete().await?;
            r
        },
        async || {
            let w = filled(ctx, n, a.payload_bytes).await?;
            let r = raw_round(&w, &pool, n, conc, prefetch).await;
            w.delete().await?;
            r
        },
    )
    .await?;
    pool.close().await;
    let load = Load::new(a.payload_bytes, conc, usize::from(prefetch), 1, n);
    Ok(Measurement::new(
        "consumer_inbox_pg_nats",
        "nats-consumer",
        "msg/s",
        median(&ours),
        median(&raw),
        "raw async-nats pull of the consumer's durable + sqlx transaction + double ack, same concurrency",
        Target::at_least(0.8),
        load,
    )
    .detail("postroom_rounds", &ours)
    .detail("raw_rounds", &raw)
    .note(PG_FSYNC_NOTE))
}

/// A new workload with `n` fresh messages in its work stream.
async fn filled(ctx: &Ctx, n: usize, bytes: usize) -> Result<NatsWorkload, BenchError> {
    let w = NatsWorkload::create(&ctx.endpoints, "consumer").await?;
    w.raw_publish(&payload::outgoing(0, n, bytes), 500).await?;
    Ok(w)
}

/// Time postroom's consumer until it handled and acked `n` messages.
async fn postroom_round(
    w: &NatsWorkload,
    pool: &PgPool,
    n: usize,
    conc: usize,
    prefetch: u16,
) -> Result<f64, BenchError> {
    let progress = Arc::new(Progress::default());
    let handler = Arc::new(InboxHandler::new(pool.clone(), progress.clone()));
    let sub = w.subscriber(prefetch).await?;
    timed_consumer(handler, conc, sub, &progress, n, "postroom NATS consumer").await
}

/// Time the raw loop until it handled and acked `n` messages.
async fn raw_round(
    w: &NatsWorkload,
    pool: &PgPool,
    n: usize,
    conc: usize,
    prefetch: u16,
) -> Result<f64, BenchError> {
    let consumer = w.raw_consumer().await?;
    let mut stream = consumer
        .stream()
        .max_messages_per_batch(usize::from(prefetch))
        .messages()
        .await
        .map_err(|e| BenchError::Stalled(format!("raw pull: {e}")))?;
    let permits = Arc::new(Semaphore::new(conc));
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout(n);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let permit = permits.clone().acquire_owned().await.expect("open");
        let msg = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| BenchError::Stalled("raw NATS consumer stalled".into()))?
            .ok_or_else(|| BenchError::Stalled("raw NATS pull ended".into()))?
            .map_err(|e| BenchError::Stalled(format!("raw NATS delivery: {e}")))?;
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let env: Envelope = serde_json::from_slice(&msg.payload)
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
            msg.double_ack()
                .await
                .map_err(|e| BenchError::Stalled(format!("raw ack: {e}")))?;
            drop(permit);
            Ok::<_, BenchError>(())
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("raw task: {e}")))??;
    }
    let per_sec = rate(n, started.elapsed());
    drop(stream);
    Ok(per_sec)
}
