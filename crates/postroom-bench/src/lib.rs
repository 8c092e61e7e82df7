//! # postroom-bench
//!
//! Speed and cost measured, not asserted. Each scenario runs beside its baseline in the same
//! process run, on isolated resources (a fresh PostgreSQL database, random RabbitMQ names,
//! a temporary SQLite file), and reports `postroom / baseline` as a ratio against a target.
//! Absolute figures are context; the machines are shared and noisy, so the ratios are the
//! result.
//!
//! | scenario | postroom | baseline | target |
//! |---|---|---|---|
//! | `relay` | `OutboxRelay` PostgreSQL → RabbitMQ quorum queue | raw lapin loop, pipelined confirms | ≥ 0.9 |
//! | `consumer` | `Consumer` + inbox + business update in PostgreSQL | lapin consume + sqlx tx + ack | ≥ 0.8 |
//! | `consumer` (batched) | many messages per transaction, acked after commit | per-message mode | ≥ 3 |
//! | `embedded` | relay and consumer on SQLite | raw SQLite transactions of the same shape | ≥ 0.9 / ≥ 0.8 |
//! | `latency` | outbox commit → handler start, p99: through the relay; sent by the producer after its commit | raw publish → raw delivery, p99 | report; ≤ 1.5× |
//! | `retry` | p99 lateness of retries over the ladder | 10 % of the stage delay (floor 200 ms) | ≤ 1, none early |
//! | `scheduled` | p99 lateness of scheduled sends on SQLite, relay idle wait 60 s | 100 ms | ≤ 1, none early |
//! | `hot-loop` | consumer CPU and deliveries with the database down | 5 % of a core; messages × stages | ≤ 1 |
//! | `memory` | relay and consumer peak RSS over a backlog, own processes | 64 MiB | ≤ 1 |
//! | `nats-relay` | `OutboxRelay` PostgreSQL → JetStream stream (PubAck, `Nats-Msg-Id`) | raw async-nats publish, PubAcks awaited | ≥ 0.9 |
//! | `nats-consumer` | `Consumer` on JetStream + inbox + business update in PostgreSQL | raw async-nats pull + sqlx tx + double ack | ≥ 0.8 |
//! | `kafka-relay` | `OutboxRelay` PostgreSQL → Kafka topic, idempotent producer | raw rdkafka producer loop, same topic | ≥ 0.9 |
//! | `kafka-consumer` | `Consumer` on Kafka + inbox + business update in PostgreSQL | rdkafka poll + sqlx tx + offset commit | ≥ 0.8 |
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     bench: postroom_bench::BenchArgs,
//! }
//!
//! # async fn demo() -> Result<(), postroom_bench::BenchError> {
//! let report = postroom_bench::run(Cli::parse().bench).await?;
//! assert!(report.results.iter().all(|m| m.ratio.is_finite()));
//! # Ok(()) }
//! ```
//!
//! The memory scenario re-runs the current executable with the same arguments and
//! `POSTROOM_BENCH_CHILD` set, so that relay and consumer each have a process of their own:
//! a binary that calls [`run`] with its parsed [`BenchArgs`] supports it without more wiring.

pub mod args;
pub mod child;
pub mod error;
pub mod payload;
pub mod report;
pub mod resources;
pub mod scenarios;
pub mod sys;

pub use args::{BenchArgs, Scenario};
pub use error::BenchError;
pub use report::{BenchReport, Measurement, Target};

use resources::Endpoints;
use resources::pg::BenchDb;

/// Said beside every PostgreSQL figure.
pub const PG_FSYNC_NOTE: &str = "PostgreSQL's fsync is unrealistically cheap on this VM \
    (virtual disk on a shared host): absolute PostgreSQL figures are optimistic; compare the \
    ratios measured in the same run";

/// What every scenario gets.
#[derive(Debug)]
pub struct Ctx {
    /// The arguments.
    pub args: BenchArgs,
    /// The servers.
    pub endpoints: Endpoints,
    /// The run's PostgreSQL database (when a selected scenario needs one).
    pub db: Option<BenchDb>,
}

impl Ctx {
    /// The run's PostgreSQL database.
    pub fn db(&self) -> Result<&BenchDb, BenchError> {
        self.db
            .as_ref()
            .ok_or_else(|| BenchError::Config("no PostgreSQL database in this run".into()))
    }
}

/// Run the selected scenarios, print the table, write the JSON when asked, and return the
/// report. A scenario that fails is listed in `failures` and the others still run.
pub async fn run(args: BenchArgs) -> Result<BenchReport, BenchError> {
    if let Some(spec) = child::spec_from_env() {
        let _ = &args;
        child::run_child(spec?).await?;
        std::process::exit(0);
    }
    let endpoints = Endpoints {
        publisher_channels: usize::from(args.publisher_channels),
        ..Endpoints::from_env()
    };
    let selected = args.selected();
    let needs_pg = selected.iter().any(|s| *s != Scenario::Embedded);
    let db = if needs_pg {
        Some(BenchDb::create(&endpoints.pg).await?)
    } else {
        None
    };
    let postgres_settings = match &db {
        Some(db) => Some(db.settings().await?),
        None => None,
    };
    let ctx = Ctx {
        args,
        endpoints,
        db,
    };
    let mut report = BenchReport {
        cores: sys::cores(),
        postgres_settings,
        results: Vec::new(),
        failures: Vec::new(),
        notes: Vec::new(),
    };
    if needs_pg {
        report.notes.push(PG_FSYNC_NOTE.into());
    }
    for s in selected {
        eprintln!("postroom-bench: running {s:?}");
        match scenarios::run(&ctx, s).await {
            Ok(ms) => {
                for m in &ms {
                    eprintln!(
                        "postroom-bench: {} postroom={:.2} baseline={:.2} {} ratio={:.3}",
                        m.name, m.postroom, m.baseline, m.unit, m.ratio
                    );
                }
                report.results.extend(ms);
            }
            Err(e) => {
                eprintln!("postroom-bench: {s:?} failed: {e}");
                report.failures.push(format!("{s:?}: {e}"));
            }
        }
    }
    // The run's database is dropped with its handle.
    drop(ctx.db);
    postroom_ops::say!("{}", report.table());
    if let Some(path) = &ctx.args.json {
        let text = serde_json::to_vec_pretty(&report)
            .map_err(|e| BenchError::Config(format!("serialising the report: {e}")))?;
        std::fs::write(path, text).map_err(|source| BenchError::Io {
            context: format!("writing {}", path.display()),
            source,
        })?;
        postroom_ops::say!("wrote {}", path.display());
    }
    Ok(report)
}
