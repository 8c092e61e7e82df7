//! `pg-consumer`: the consumer loop on the queue in tables (`PgQueue`) with a handler that
//! claims the inbox and updates the aggregate's row in one transaction, beside the same
//! claim-with-lease, transaction and delete run raw; prefetch 16. Target ≥ 80 %.

use super::{Columns, Figure, at_each_connection_count, messages, run_workers, timed};
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::report::{Measurement, Target};
use crate::resources::pg::EFFECT_SQL;
use crate::resources::rabbit::CONSUMER;
use crate::scenarios::handler::{InboxHandler, Progress, timed_consumer};
use postroom_core::EnvelopeDecoder;
use postroom_postgres::{PgQueue, PgStore, commit, inbox};
use sqlx::{PgPool, Row};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Deliveries each subscriber (and each raw claim) takes at once.
const PREFETCH: usize = 16;
/// The raw side's consumer name in the queue and the inbox.
const RAW: &str = "raw";

/// Both sides at 1 and 8 connections.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let n = ctx.args.messages();
    let figure = Figure {
        name: "pg_consumer",
        scenario: "pg-consumer",
        target: Target::at_least(0.8),
        baseline: "raw claim-with-lease + the same inbox transaction + delete",
        prefetch: PREFETCH,
        batch: 1,
    };
    at_each_connection_count(ctx, figure, async |store, conns| {
        let ours = postroom_round(ctx, store, conns, n).await?;
        let raw = raw_round(ctx, store, conns, n).await?;
        Ok((vec![ours], vec![raw]))
    })
    .await
}

/// Put `n` messages for `consumer` straight into the queue table.
async fn fill_queue(ctx: &Ctx, pool: &PgPool, consumer: &str, n: usize) -> Result<(), BenchError> {
    for chunk in messages(ctx, n).chunks(500) {
        let c = Columns::of(chunk);
        sqlx::query(
            "INSERT INTO postroom_queue (consumer, message_id, routing_key, headers, body)
             SELECT $1, * FROM unnest($2::uuid[], $3::text[], $4::jsonb[], $5::bytea[])",
        )
        .bind(consumer)
        .bind(c.ids)
        .bind(c.routes)
        .bind(c.headers)
        .bind(c.bodies)
        .execute(pool)
        .await
        .ctx("filling the queue")?;
    }
    Ok(())
}

async fn postroom_round(
    ctx: &Ctx,
    store: &PgStore,
    conns: u32,
    n: usize,
) -> Result<f64, BenchError> {
    let queue = store
        .queue(
            PgQueue::defaults()
                .prefetch(PREFETCH)
                .poll_interval(Duration::from_millis(2)),
        )
        .ctx("the queue")?;
    let sub = queue
        .subscribe(CONSUMER, &[crate::payload::ROUTING_KEY])
        .await
        .ctx("subscribing")?;
    fill_queue(ctx, store.pool(), CONSUMER, n).await?;
    let progress = Arc::new(Progress::default());
    let handler = Arc::new(InboxHandler::new(store.pool().clone(), progress.clone()));
    let started = Instant::now();
    timed_consumer(handler, conns as usize, sub, &progress, n, "the consumer").await?;
    Ok(timed("pg-consumer postroom", conns, n, started))
}

async fn raw_round(ctx: &Ctx, store: &PgStore, conns: u32, n: usize) -> Result<f64, BenchError> {
    let pool = store.pool().clone();
    fill_queue(ctx, &pool, RAW, n).await?;
    let started = Instant::now();
    run_workers(conns, |i| raw_consumer(store.clone(), i)).await?;
    Ok(timed("pg-consumer raw", conns, n, started))
}

/// Raw consumer `i`: claim up to [`PREFETCH`] deliveries with a lease, run each one's inbox
/// transaction and delete it, until none is left.
async fn raw_consumer(store: PgStore, i: u32) -> Result<(), BenchError> {
    let pool = store.pool().clone();
    let decoder = EnvelopeDecoder::new().accept(crate::payload::MESSAGE_TYPE, 1..=1);
    loop {
        let rows = sqlx::query(
            "WITH c AS (SELECT id FROM postroom_queue WHERE consumer = $3 AND visible_at <= now()
                             AND (leased_until IS NULL OR leased_until < now()) ORDER BY visible_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
                         UPDATE postroom_queue q SET lease_owner = $1, lease_token = gen_random_uuid(),
                             leased_until = now() + interval '30 seconds', delivery_count = q.delivery_count + 1
                         FROM c WHERE q.id = c.id RETURNING q.id, q.lease_token, q.body",
        )
        .bind(format!("raw-{i}"))
        .bind(PREFETCH as i64)
        .bind(RAW)
        .fetch_all(&pool)
        .await
        .ctx("raw claim")?;
        if rows.is_empty() {
            return Ok(());
        }
        for r in rows {
            let (id, token, body): (i64, uuid::Uuid, Vec<u8>) = (r.get(0), r.get(1), r.get(2));
            // The same decoding and the same rows as the postroom handler.
            let env = decoder
                .decode(&body)
                .map_err(|e| BenchError::Config(format!("bench body: {e}")))?;
            let mut tx = store.begin().await.ctx("begin")?;
            if inbox::claim(&mut tx, store.prefix(), RAW, env.id)
                .await
                .ctx("inbox")?
            {
                sqlx::query(EFFECT_SQL)
                    .bind(&env.aggregate.id)
                    .execute(&mut *tx)
                    .await
                    .ctx("effect")?;
            }
            commit(tx).await.ctx("commit")?;
            sqlx::query("DELETE FROM postroom_queue WHERE id = $1 AND lease_token = $2")
                .bind(id)
                .bind(token)
                .execute(&pool)
                .await
                .ctx("raw delete")?;
        }
    }
}
