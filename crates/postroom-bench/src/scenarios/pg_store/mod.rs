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

/// How a store scenario is reported, and the load it runs beside the connection count.
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    /// The measurement's stable name; the connection count is appended (`pg_relay_8conn`).
    pub name: &'static str,
    /// The `--scenario` group it is reported under.
    pub scenario: &'static str,
    /// The target on postroom's figure over the baseline's.
    pub target: Target,
    /// What the baseline does.
    pub baseline: &'static str,
    /// Deliveries taken at once (0 where none applies).
    pub prefetch: usize,
    /// Rows per claim or per transaction.
    pub batch: usize,
}

impl Figure {
    /// The measurement at `conns` connections: medians of the rounds, with the rounds and the
    /// aggregates attached.
    fn measurement(&self, ctx: &Ctx, conns: u32, ours: &[f64], baseline: &[f64]) -> Measurement {
        let a = &ctx.args;
        let load = Load::new(
            a.payload_bytes,
            conns as usize,
            self.prefetch,
            self.batch,
            a.messages(),
        );
        Measurement::new(
            &format!("{}_{conns}conn", self.name),
            self.scenario,
            "msg/s",
            median(ours),
            median(baseline),
            self.baseline,
            self.target,
            load,
        )
        .detail("postroom_rounds", ours)
        .detail("baseline_rounds", baseline)
        .detail("aggregates", a.aggregates())
        .note(PG_FSYNC_NOTE)
    }
}

/// Measure a scenario at each connection count of [`CONNECTIONS`]: `pair` gives postroom's
/// rounds and the baseline's on a fresh [`store`] of that many connections, reported as
/// `figure`.
pub async fn at_each_connection_count(
    ctx: &Ctx,
    figure: Figure,
    mut pair: impl AsyncFnMut(&PgStore, u32) -> Result<(Vec<f64>, Vec<f64>), BenchError>,
) -> Result<Vec<Measurement>, BenchError> {
    let mut out = Vec::new();
    for conns in CONNECTIONS {
        let store = store(ctx, conns).await?;
        let (ours, baseline) = pair(&store, conns).await?;
        store.pool().close().await;
        out.push(figure.measurement(ctx, conns, &ours, &baseline));
    }
    Ok(out)
}

/// Run `worker(i)` for each of `conns` workers on a task of its own, and wait for them all;
/// a failed or panicked one fails the round.
pub async fn run_workers<F>(conns: u32, worker: impl Fn(u32) -> F) -> Result<(), BenchError>
where
    F: Future<Output = Result<(), BenchError>> + Send + 'static,
{
    join_all((0..conns).map(|i| tokio::spawn(worker(i))).collect()).await
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
