//! Scenario e2e: the whole path on one workload, measured three ways in the same run.
//!
//! N orders on RabbitMQ quorum queues; a share fails once and is retried by the broker after
//! the delay, a share is undecodable and parked (dead-lettered) on its first delivery; each
//! other order is applied as an inbox row + a counter update in one PostgreSQL transaction
//! and acked after the commit. The time runs from the first publish (outbox write) until
//! every order to apply was applied:
//! - raw: lapin + sqlx written by hand (see [`raw`]), the baseline;
//! - postroom through the outbox and the relay, with the per-message `Consumer` whose handler
//!   claims the inbox row and updates the counter in one statement (`inbox::apply_once`;
//!   target ≥ 1× raw);
//! - the same consumer with the raw service's handler, a transaction of four statements
//!   (reported: postroom's own cost per message, beside the raw service's);
//! - the same with the `BatchConsumer` (target ≥ 2× raw).
//!
//! Rates count every message of the run (N / time); the p50 / p99 latency is one message's,
//! from its send (the start of its outbox transaction; the raw publish) to its commit.

pub mod mix;
pub mod postroom;
pub mod raw;

use crate::error::BenchError;
use crate::payload::{median, percentile};
use crate::report::{Load, Measurement, Target};
use crate::resources::rabbit::Workload;
use crate::{Ctx, PG_FSYNC_NOTE};
use mix::{Kind, Mix};
use postroom::{Mode, Shape};
use postroom_core::RetryLadder;

/// Figures of one implementation over the rounds.
#[derive(Debug, Default)]
struct Figures {
    rates: Vec<f64>,
    latencies_ms: Vec<f64>,
}

impl Figures {
    fn add(&mut self, n: usize, elapsed: std::time::Duration, latencies: Vec<f64>) {
        self.rates.push(super::rate(n, elapsed));
        self.latencies_ms.extend(latencies);
    }

    fn summary(&mut self) -> serde_json::Value {
        serde_json::json!({
            "msg_per_sec": median(&self.rates),
            "rounds": self.rates,
            "p50_ms": percentile(&mut self.latencies_ms, 50.0),
            "p99_ms": percentile(&mut self.latencies_ms, 99.0),
            "max_ms": percentile(&mut self.latencies_ms, 100.0),
        })
    }
}

/// Run the four implementations `--rounds` times, rotating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let a = &ctx.args;
    let ladder: RetryLadder = a.e2e_retry_delay.parse().map_err(|e| {
        BenchError::Config(format!("--e2e-retry-delay {:?}: {e}", a.e2e_retry_delay))
    })?;
    if ladder.len() != 1 {
        return Err(BenchError::Config(format!(
            "--e2e-retry-delay {:?}: give one delay",
            a.e2e_retry_delay
        )));
    }
    let mix = Mix {
        n: a.messages(),
        fail_share: a.e2e_fail_share,
        poison_share: a.e2e_poison_share,
    };
    let (conc, lanes, batch) = (
        usize::from(a.concurrency),
        usize::from(a.e2e_lanes),
        usize::from(a.batch),
    );
    let batched_prefetch =
        u16::try_from((lanes * batch * 2).max(usize::from(a.e2e_prefetch))).unwrap_or(u16::MAX);
    let w = Workload::create(&ctx.endpoints, "e2e", &a.e2e_retry_delay).await?;
    let queues = raw::RawQueues::declare(&w, ladder.delays()[0]).await?;
    // The raw service's own pool, with sqlx's defaults; postroom's store builds its own.
    let raw_pool = ctx
        .db()?
        .pool(u32::try_from(conc + 4).unwrap_or(64))
        .await?;
    let store = ctx
        .db()?
        .store(u32::try_from(conc.max(lanes) + 4).unwrap_or(64))
        .await?;
    let shape = |mode, concurrency, prefetch| Shape {
        mode,
        concurrency,
        prefetch,
        batch,
        bytes: a.payload_bytes,
        ladder: ladder.clone(),
        delete_published: a.relay_delete_published,
    };
    let per_shape = shape(Mode::PerMessage, conc, a.e2e_prefetch);
    // postroom's implementations: the key of each in the JSON's consumer stats, its shape,
    // its figures.
    let mut ours = [
        ("per_message", per_shape.clone(), Figures::default()),
        (
            "per_message_transaction",
            shape(Mode::PerMessageTransaction, conc, a.e2e_prefetch),
            Figures::default(),
        ),
        (
            "batched",
            shape(Mode::Batched, lanes, batched_prefetch),
            Figures::default(),
        ),
    ];
    let mut raw_f = Figures::default();
    let mut stats = serde_json::Map::new();
    let turns = ours.len() + 1;
    for r in 0..a.rounds() {
        for k in 0..turns {
            match (r + k) % turns {
                0 => {
                    let (elapsed, lat) =
                        raw::round(&w, &queues, &raw_pool, mix, &per_shape).await?;
                    Figures::add(&mut raw_f, mix.n, elapsed, lat);
                }
                i => {
                    let (key, shape, figures) = &mut ours[i - 1];
                    let acks = Acks::now(&w);
                    let got = postroom::round(&w, &store, mix, shape).await?;
                    stats.insert((*key).into(), acks.since(&w, stats_json(&got.stats)));
                    figures.add(mix.n, got.elapsed, got.latencies_ms);
                }
            }
        }
    }
    store.pool().close().await;
    raw_pool.close().await;
    // The figures are measured: a broker that cannot be reached for the cleanup (another
    // program restarting it) does not throw them away.
    let prefix = w.prefix.clone();
    if let Err(e) = w.delete().await {
        eprintln!("postroom-bench: e2e: RabbitMQ objects named {prefix}* may be left behind: {e}");
    }
    let [per_s, per_tx_s, batched_s] = ours.map(|(_, _, mut f)| f.summary());
    let raw_s = raw_f.summary();
    let workload = serde_json::json!({
        "messages": mix.n,
        "fail_once": mix.count(Kind::FailsOnce),
        "undecodable": mix.count(Kind::Undecodable),
        "retry_delay": a.e2e_retry_delay,
        "outbox_rows_per_transaction": batch,
        "relay_batch": batch,
        "relay_deletes_published": a.relay_delete_published,
        "raw_publish_window": batch,
    });
    let per_load = Load::new(a.payload_bytes, conc, usize::from(a.e2e_prefetch), 1, mix.n);
    let batched_load = Load::new(
        a.payload_bytes,
        lanes,
        usize::from(batched_prefetch),
        batch,
        mix.n,
    );
    let raw_kind = "raw lapin + sqlx service: pipelined confirms, workers with a transaction each, TTL retry queue, DLX for poison";
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let throughput = |name, ours: &serde_json::Value, target: Target, load: &Load| {
        Measurement::new(
            name,
            "e2e",
            "msg/s",
            f(ours, "msg_per_sec"),
            f(&raw_s, "msg_per_sec"),
            raw_kind,
            target,
            load.clone(),
        )
        .detail("postroom", ours.clone())
        .detail("raw", raw_s.clone())
        .detail("workload", workload.clone())
        .detail("consumer_stats", stats.clone())
        .note(PG_FSYNC_NOTE)
    };
    let latency = |name, ours: &serde_json::Value, key: &str, load: &Load| {
        Measurement::new(
            name,
            "e2e",
            "ms",
            f(ours, key),
            f(&raw_s, key),
            "raw service, same run: publish to commit",
            Target::report(),
            load.clone(),
        )
        .note("send (outbox transaction start; raw publish) to the commit that applied it; failed-once messages include the retry delay")
    };
    Ok(vec![
        throughput(
            "e2e_outbox_per_message",
            &per_s,
            Target::at_least(1.0),
            &per_load,
        )
        .note("handler: inbox claim and counter update in one statement (inbox::apply_once)"),
        throughput(
            "e2e_outbox_per_message_transaction",
            &per_tx_s,
            Target::report(),
            &per_load,
        )
        .note("handler: BEGIN, inbox claim, counter update, COMMIT, as the raw service's"),
        throughput(
            "e2e_outbox_batched",
            &batched_s,
            Target::at_least(2.0),
            &batched_load,
        ),
        latency("e2e_per_message_latency_p50", &per_s, "p50_ms", &per_load),
        latency("e2e_per_message_latency_p99", &per_s, "p99_ms", &per_load),
        latency(
            "e2e_batched_latency_p50",
            &batched_s,
            "p50_ms",
            &batched_load,
        ),
        latency(
            "e2e_batched_latency_p99",
            &batched_s,
            "p99_ms",
            &batched_load,
        ),
    ])
}

/// The broker link's ack counters before a postroom round.
struct Acks {
    acts: u64,
    acked: u64,
    by_runs: u64,
}

impl Acks {
    fn now(w: &Workload) -> Self {
        let s = w.broker.stats();
        Self {
            acts: s.ack_acts(),
            acked: s.acked(),
            by_runs: s.acked_by_runs(),
        }
    }

    /// `json` with the round's basic.ack frames, deliveries acked, and those acked as part of
    /// a run (one `multiple` ack for several).
    fn since(&self, w: &Workload, mut json: serde_json::Value) -> serde_json::Value {
        let s = w.broker.stats();
        json["ack_frames"] = (s.ack_acts() - self.acts).into();
        json["acked"] = (s.acked() - self.acked).into();
        json["acked_by_runs"] = (s.acked_by_runs() - self.by_runs).into();
        json
    }
}

fn stats_json(s: &postroom_core::stats::StatsSnapshot) -> serde_json::Value {
    serde_json::json!({
        "applied": s.applied,
        "duplicates": s.duplicates,
        "retries_by_stage": s.retries_by_stage,
        "parked_by_code": s.parked_by_code,
        "settle_failures": s.settle_failures,
    })
}
