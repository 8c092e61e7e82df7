//! `pg-relay`: `conns` relays running the loop users run (`OutboxRelay::run`: publish batch n
//! while marking n-1 and claiming n+1) into a publisher that confirms at once, beside a raw
//! loop of the same claim-with-lease UPDATE and mark UPDATE (no per-aggregate order, no relay
//! loop). An uncounted warm-up pair first (connections opened, statements planned, tables
//! cached), then `--rounds` pairs (default 5) alternating which side goes first. Target ≥ 90 %.

use super::{Columns, Figure, at_each_connection_count, join_all, messages, run_workers, timed};
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::report::{Measurement, Target};
use crate::scenarios::broker::relay::{Counting, fill_outbox};
use postroom_core::{
    OutboxRelay, OutboxStore, OutgoingMessage, Publisher, RelayConfig, async_trait,
};
use postroom_postgres::PgStore;
use sqlx::{PgPool, Row};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const RAW_CLAIM: &str = "WITH c AS (SELECT seq FROM raw_outbox WHERE published_at IS NULL
        AND (locked_until IS NULL OR locked_until < now()) ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED)
    UPDATE raw_outbox o SET locked_by = $1, locked_until = now() + interval '30 seconds' FROM c WHERE o.seq = c.seq
    RETURNING o.id, o.route, o.headers, o.body, o.aggregate_key";

/// A broker that confirms at once.
struct ConfirmAtOnce;

#[async_trait]
impl Publisher for ConfirmAtOnce {
    async fn publish(&self, _: &OutgoingMessage) -> postroom_core::Result<()> {
        Ok(())
    }
}

/// Both sides at 1 and 8 connections.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let (n, batch) = (ctx.args.messages(), usize::from(ctx.args.batch));
    let msgs = messages(ctx, n);
    let figure = Figure {
        name: "pg_relay",
        scenario: "pg-relay",
        target: Target::at_least(0.9),
        baseline: "raw claim-with-lease and mark statements, no per-aggregate order",
        prefetch: 0,
        batch,
    };
    at_each_connection_count(ctx, figure, async |store, conns| {
        let warm_up = &msgs[..n.min(2000)];
        postroom_round(store, conns, batch, warm_up).await?;
        raw_round(store, conns, batch, warm_up).await?;
        crate::scenarios::alternate(
            ctx.args.pg_relay_rounds(),
            async || postroom_round(store, conns, batch, &msgs).await,
            async || raw_round(store, conns, batch, &msgs).await,
        )
        .await
    })
    .await
}

/// Fill the outbox, then time the relays until every row is confirmed and marked.
async fn postroom_round(
    store: &PgStore,
    conns: u32,
    batch: usize,
    msgs: &[OutgoingMessage],
) -> Result<f64, BenchError> {
    let n = msgs.len();
    fill_outbox(store, n, |i| msgs[i].clone()).await?;
    let ob: Arc<dyn OutboxStore> = Arc::new(store.outbox());
    let confirmed = Arc::new(AtomicUsize::new(0));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let tasks: Vec<_> = (0..conns)
        .map(|i| {
            let cfg = RelayConfig {
                relay_id: format!("bench-{i}"),
                batch_size: batch,
                retention: None,
                idle_wait: Duration::from_millis(500),
                ..RelayConfig::default()
            };
            let publisher = Arc::new(Counting {
                inner: Arc::new(ConfirmAtOnce),
                confirmed: confirmed.clone(),
            });
            let relay = OutboxRelay::new(ob.clone(), publisher, cfg);
            let rx = stop_rx.clone();
            tokio::spawn(async move {
                relay.run(rx).await;
                Ok(())
            })
        })
        .collect();
    // Counted in the publisher, so that finding the end costs the database nothing.
    while confirmed.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    while ob.pending().await.ctx("pending rows")? > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let per_sec = timed("pg-relay postroom", conns, n, started);
    let _ = stop.send(true);
    join_all(tasks).await?;
    Ok(per_sec)
}

/// The same claim and mark statements, raw.
async fn raw_round(
    store: &PgStore,
    conns: u32,
    batch: usize,
    msgs: &[OutgoingMessage],
) -> Result<f64, BenchError> {
    let pool = store.pool().clone();
    sqlx::query("TRUNCATE raw_outbox")
        .execute(&pool)
        .await
        .ctx("emptying the raw outbox")?;
    for chunk in msgs.chunks(500) {
        let c = Columns::of(chunk);
        sqlx::query(
            "INSERT INTO raw_outbox (id, aggregate_key, route, headers, body)
             SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[])",
        )
        .bind(c.ids)
        .bind(c.keys)
        .bind(c.routes)
        .bind(c.headers)
        .bind(c.bodies)
        .execute(&pool)
        .await
        .ctx("filling the raw outbox")?;
    }
    sqlx::query("ANALYZE raw_outbox")
        .execute(&pool)
        .await
        .ctx("analyze")?;
    let started = Instant::now();
    run_workers(conns, |i| claim_and_mark(pool.clone(), i, batch)).await?;
    Ok(timed("pg-relay raw", conns, msgs.len(), started))
}

/// Raw relay `i`: claim a batch with a lease and mark it published, until no row is left
/// unpublished.
async fn claim_and_mark(pool: PgPool, i: u32, batch: usize) -> Result<(), BenchError> {
    loop {
        let rows = sqlx::query(RAW_CLAIM)
            .bind(format!("raw-{i}"))
            .bind(batch as i64)
            .fetch_all(&pool)
            .await
            .ctx("raw claim")?;
        if rows.is_empty() {
            let left: i64 =
                sqlx::query_scalar("SELECT count(*) FROM raw_outbox WHERE published_at IS NULL")
                    .fetch_one(&pool)
                    .await
                    .ctx("raw count")?;
            if left == 0 {
                return Ok(());
            }
            continue;
        }
        let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(0)).collect();
        sqlx::query(
            "UPDATE raw_outbox SET published_at = now(), locked_by = NULL, locked_until = NULL WHERE id = ANY($1)",
        )
        .bind(ids)
        .execute(&pool)
        .await
        .ctx("raw mark")?;
    }
}
