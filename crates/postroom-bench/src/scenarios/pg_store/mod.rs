//! The PostgreSQL store alone, without a broker (what `postroom-postgres`' claim, queue and
//! outbox statements cost): the relay into a publisher that confirms at once, the consumer on
//! the queue in tables, and batched producing, each beside the same work run raw, at 1 and 8
//! connections. Messages are spread over `--aggregates` aggregates (`PG_BENCH_AGGREGATES`).

pub mod consumer;
pub mod produce;
pub mod relay;

use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::{Ctx, PG_FSYNC_NOTE};
use postroom_core::OutgoingMessage;
use postroom_postgres::PgStore;
use sqlx::types::Json;
use std::time::Instant;

/// Connections (relays, handlers, producers) each scenario runs at.
pub const CONNECTIONS: [u32; 2] = [1, 8];

/// The raw relay's table: the shape of postroom's outbox without its ordering columns.
const RAW_DDL: &str = "CREATE TABLE IF NOT EXISTS raw_outbox (seq BIGSERIAL PRIMARY KEY, id UUID NOT NULL UNIQUE,
        aggregate_key TEXT NOT NULL, route TEXT NOT NULL, headers JSONB NOT NULL, body BYTEA NOT NULL,
        locked_by TEXT, locked_until TIMESTAMPTZ, published_at TIMESTAMPTZ);
    CREATE INDEX IF NOT EXISTS raw_outbox_unpublished ON raw_outbox (seq) WHERE published_at IS NULL;
    TRUNCATE bench_effects, raw_outbox, postroom_outbox, postroom_inbox, postroom_queue;";

/// A migrated store with `conns` connections and empty tables.
pub async fn store(ctx: &Ctx, conns: u32) -> Result<PgStore, BenchError> {
    let store = ctx.db()?.store(conns).await?;
    sqlx::raw_sql(RAW_DDL)
        .execute(store.pool())
        .await
        .ctx("creating the raw tables")?;
    Ok(store)
}

/// The scenario's messages `0..n`.
#[must_use]
pub fn messages(ctx: &Ctx, n: usize) -> Vec<OutgoingMessage> {
    let (bytes, aggregates) = (ctx.args.payload_bytes, ctx.args.aggregates());
    (0..n)
        .map(|i| payload::message_over(i, bytes, aggregates))
        .collect()
}

/// Messages as the arrays an `unnest` INSERT binds.
pub struct Columns {
    /// Ids.
    pub ids: Vec<uuid::Uuid>,
    /// Aggregate keys.
    pub keys: Vec<String>,
    /// Routing keys.
    pub routes: Vec<String>,
    /// Headers.
    pub headers: Vec<Json<postroom_core::Headers>>,
    /// Bodies.
    pub bodies: Vec<Vec<u8>>,
}

impl Columns {
    /// The columns of `chunk`.
    #[must_use]
    pub fn of(chunk: &[OutgoingMessage]) -> Self {
        Self {
            ids: chunk.iter().map(|m| m.id.as_uuid()).collect(),
            keys: chunk.iter().map(OutgoingMessage::aggregate_key).collect(),
            routes: chunk.iter().map(|m| m.route.as_str().to_string()).collect(),
            headers: chunk.iter().map(|m| Json(m.headers.clone())).collect(),
            bodies: chunk.iter().map(|m| m.body.clone()).collect(),
        }
    }
}

/// One timed round: messages per second, printed as it ends.
pub fn timed(label: &str, conns: u32, n: usize, started: Instant) -> f64 {
    let per_sec = super::rate(n, started.elapsed());
    eprintln!("postroom-bench: {label} conns={conns} {per_sec:.0} msg/s");
    per_sec
}

/// The measurement of one scenario at one connection count: medians of the rounds.
#[allow(clippy::too_many_arguments)]
pub fn measurement(
    ctx: &Ctx,
    name: &str,
    scenario: &str,
    conns: u32,
    ours: &[f64],
    baseline: &[f64],
    baseline_kind: &str,
    target: Target,
    load: Load,
) -> Measurement {
    Measurement::new(
        &format!("{name}_{conns}conn"),
        scenario,
        "msg/s",
        median(ours),
        median(baseline),
        baseline_kind,
        target,
        load,
    )
    .detail("postroom_rounds", ours)
    .detail("baseline_rounds", baseline)
    .detail("aggregates", ctx.args.aggregates())
    .note(PG_FSYNC_NOTE)
}

/// Wait for every task; a panicked one is a failed round.
pub async fn join_all(
    tasks: Vec<tokio::task::JoinHandle<Result<(), BenchError>>>,
) -> Result<(), BenchError> {
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("bench task: {e}")))??;
    }
    Ok(())
}
