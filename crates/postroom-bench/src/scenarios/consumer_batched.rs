//! Scenario 2, batched mode: the same inbox + business update, many messages per PostgreSQL
//! transaction, every delivery acked only after the commit, built from postroom's RabbitMQ
//! subscriber and deliveries. Compared with postroom's per-message consumer measured just
//! before. Target ≥ 3×.
//!
//! postroom-core has no batch consumer yet, so the loop lives here: pull up to `--batch`
//! deliveries (waiting briefly for stragglers), claim their inbox rows with one statement,
//! apply the counters with one statement, commit, then ack each delivery. Two batches are in
//! flight at once so pulling overlaps the transaction.

use super::consumer::fill_queue;
use super::{rate, timeout};
use crate::error::{BenchError, Context};
use crate::payload::median;
use crate::report::{Load, Measurement, Target};
use crate::resources::pg::add_effects;
use crate::resources::rabbit::{CONSUMER, Workload};
use crate::{Ctx, PG_FSYNC_NOTE};
use postroom_core::{Delivery, EnvelopeDecoder, Subscriber};
use postroom_rabbitmq::RabbitDelivery;
use sqlx::PgPool;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Batches being committed at once.
const IN_FLIGHT: usize = 2;

/// Measure the batched mode against `per_message` (msg/s of postroom's consumer).
pub async fn run(ctx: &Ctx, per_message: f64) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let (n, batch) = (a.messages(), usize::from(a.batch));
    let prefetch = a.prefetch.max(a.batch.saturating_mul(2));
    let w = Workload::create(&ctx.endpoints, "batched", "5s").await?;
    let pool = ctx.db()?.store(IN_FLIGHT as u32 + 1).await?.pool().clone();
    let mut rounds = Vec::new();
    for _ in 0..a.rounds() {
        fill_queue(&w, n, a.payload_bytes).await?;
        rounds.push(round(&w, &pool, n, batch, prefetch).await?);
    }
    pool.close().await;
    w.delete().await?;
    let load = Load::new(a.payload_bytes, IN_FLIGHT, usize::from(prefetch), batch, n);
    Ok(Measurement::new(
        "consumer_inbox_pg_batched",
        "consumer",
        "msg/s",
        median(&rounds),
        per_message,
        "postroom per-message consumer (consumer_inbox_pg)",
        Target::at_least(3.0),
        load,
    )
    .detail("batched_rounds", &rounds)
    .note(PG_FSYNC_NOTE))
}

async fn round(
    w: &Workload,
    pool: &PgPool,
    n: usize,
    batch: usize,
    prefetch: u16,
) -> Result<f64, BenchError> {
    let mut sub = w.subscriber(prefetch)?;
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let started = Instant::now();
    let deadline = Instant::now() + timeout(n);
    let mut tasks = Vec::new();
    let mut pulled = 0;
    while pulled < n {
        if Instant::now() > deadline {
            return Err(BenchError::Stalled(format!(
                "batched consumer pulled {pulled} of {n}"
            )));
        }
        let permit = permits.clone().acquire_owned().await.expect("open");
        let mut deliveries = Vec::with_capacity(batch);
        if let Some(d) = sub
            .next(Duration::from_millis(500))
            .await
            .ctx("batched pull")?
        {
            deliveries.push(d);
        }
        while !deliveries.is_empty() && deliveries.len() < batch.min(n - pulled) {
            match sub
                .next(Duration::from_millis(2))
                .await
                .ctx("batched pull")?
            {
                Some(d) => deliveries.push(d),
                None => break,
            }
        }
        pulled += deliveries.len();
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let r = commit_batch(&pool, deliveries).await;
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("batch task: {e}")))??;
    }
    Ok(rate(n, started.elapsed()))
}

/// One transaction for the whole batch, then the acks.
async fn commit_batch(pool: &PgPool, deliveries: Vec<RabbitDelivery>) -> Result<(), BenchError> {
    if deliveries.is_empty() {
        return Ok(());
    }
    let decoder = EnvelopeDecoder::new().accept(crate::payload::MESSAGE_TYPE, 1..=1);
    let mut ids = Vec::with_capacity(deliveries.len());
    let mut keys = Vec::with_capacity(deliveries.len());
    for d in &deliveries {
        let env = decoder
            .decode(&d.message().body)
            .map_err(|e| BenchError::Config(format!("decode: {e}")))?;
        ids.push(env.id.as_uuid());
        keys.push((env.id.as_uuid(), env.aggregate.id));
    }
    let mut tx = pool.begin().await.ctx("batch begin")?;
    let fresh: HashSet<uuid::Uuid> = sqlx::query_scalar(
        "INSERT INTO postroom_inbox (consumer, message_id) SELECT $1, unnest($2::uuid[])
         ON CONFLICT DO NOTHING RETURNING message_id",
    )
    .bind(CONSUMER)
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await
    .ctx("batch inbox")?
    .into_iter()
    .collect();
    // One row per key (a statement may not update a row twice), in key order (no deadlocks
    // between batches in flight).
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for (id, key) in keys {
        if fresh.contains(&id) {
            *counts.entry(key).or_default() += 1;
        }
    }
    add_effects(&mut tx, counts).await.ctx("batch effects")?;
    tx.commit().await.ctx("batch commit")?;
    for r in futures::future::join_all(deliveries.into_iter().map(Delivery::ack)).await {
        r.map_err(|(e, _)| BenchError::Postroom {
            context: "batch ack".into(),
            source: e,
        })?;
    }
    Ok(())
}
