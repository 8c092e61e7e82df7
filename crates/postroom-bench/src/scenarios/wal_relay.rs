//! The WAL relay: the outbox read from PostgreSQL's write-ahead log through a logical
//! replication slot (`postroom_postgres::wal::WalRelay`), on a cluster the run starts for
//! itself with `wal_level = logical` (the shared server has `replica`), published to each
//! broker beside the same raw client loop as the relay scenarios (`broker::relay`). Target
//! ≥ 0.9 on each. And the physical limit: the relay with a publisher that confirms at once (no
//! broker), beside the server decoding the same rows through
//! `pg_logical_slot_peek_binary_changes`.

use super::broker::relay::{Counting, RawRelay, RelayLoad, fill_outbox, raw_round};
use super::broker::{Figure, on_workload};
use super::{alternate, rate, timeout};
use crate::error::{BenchError, Context};
use crate::report::{Load, Measurement, Target};
use crate::{Ctx, payload};
use postroom_core::{OutgoingMessage, Publisher, async_trait};
use postroom_postgres::PgStore;
use postroom_postgres::wal::{WalRelay, WalRelayConfig};
use postroom_testkit::servers::PgCluster;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Said beside every figure of this scenario.
const CLUSTER_NOTE: &str = "on a PostgreSQL cluster of the run's own (wal_level=logical, \
    fsync=off, shared_buffers=256MB) on this machine: its commits are cheaper than a durable \
    server's; compare the ratios";

/// Run the decode figure and one figure per broker.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let cluster = tokio::task::spawn_blocking(|| {
        PgCluster::start_with(&[("shared_buffers", "256MB"), ("max_connections", "100")])
    })
    .await
    .map_err(|e| BenchError::Config(format!("starting the cluster: {e}")))?;
    let store = PgStore::connect(&cluster.url("postgres"))
        .await
        .ctx("connecting to the cluster")?;
    store.migrate().await.ctx("migrating")?;
    let figure = |name, baseline, fresh_per_round| Figure {
        name,
        group: "wal-relay",
        baseline,
        fresh_per_round,
    };
    let mut out = vec![decode(ctx, &store).await?];
    let mut failed = Vec::new();
    let mut keep = |name: &str, r: Result<Measurement, BenchError>| match r {
        Ok(m) => {
            eprintln!(
                "postroom-bench: {} postroom={:.0} baseline={:.0} {} ratio={:.3}",
                m.name, m.postroom, m.baseline, m.unit, m.ratio
            );
            out.push(m);
        }
        Err(e) => {
            eprintln!("postroom-bench: {name} failed: {e}");
            failed.push(format!("{name}: {e}"));
        }
    };
    let r = on::<crate::resources::rabbit::Workload>(
        ctx,
        &store,
        figure(
            "wal_relay_to_rabbitmq",
            "raw lapin loop, pipelined confirms, no database",
            false,
        ),
    )
    .await;
    keep("wal_relay_to_rabbitmq", r);
    let r = on::<crate::resources::kafka::Workload>(
        ctx,
        &store,
        figure(
            "wal_relay_to_kafka",
            "raw rdkafka idempotent producer loop, same topic, a batch in flight, no database",
            false,
        ),
    )
    .await;
    keep("wal_relay_to_kafka", r);
    let r = on::<crate::resources::nats::NatsWorkload>(ctx, &store, figure("wal_relay_to_nats", "raw async-nats loop: publish with Nats-Msg-Id, wait for the PubAcks, same window, no database", false)).await;
    keep("wal_relay_to_nats", r);
    let r = on::<crate::resources::sqs::SqsWorkload>(
        ctx,
        &store,
        figure(
            "wal_relay_to_sqs",
            "raw SendMessageBatch loop (10 per call), no database",
            true,
        ),
    )
    .await;
    keep("wal_relay_to_sqs", r);
    if !failed.is_empty() {
        store.pool().close().await;
        return Err(BenchError::Stalled(failed.join("; ")));
    }
    store.pool().close().await;
    drop(cluster);
    Ok(out)
}

fn load_of(ctx: &Ctx, n: usize) -> RelayLoad {
    let a = &ctx.args;
    RelayLoad {
        n,
        batch: usize::from(a.batch),
        relays: 1,
        lanes: 1,
        bytes: a.payload_bytes,
        delete_published: false,
        unordered: false,
    }
}

fn config(load: &RelayLoad) -> WalRelayConfig {
    WalRelayConfig {
        relay_id: "bench-wal".into(),
        batch_size: load.batch,
        batches_in_flight: 8,
        retention: None,
        ..WalRelayConfig::default()
    }
}

/// One broker: the WAL relay's rounds beside the raw client's, alternating.
async fn on<W: RawRelay>(
    ctx: &Ctx,
    store: &PgStore,
    figure: Figure,
) -> Result<Measurement, BenchError> {
    let load = load_of(ctx, W::messages(&ctx.args));
    let shared = if figure.fresh_per_round {
        None
    } else {
        Some(W::create(ctx, "walrelay").await?)
    };
    let (ours, raw) = alternate(
        ctx.args.rounds(),
        async || {
            on_workload(ctx, "walrelay", shared.as_ref(), async |w: &W| {
                wal_round(store, w, &load).await
            })
            .await
        },
        async || {
            on_workload(ctx, "walrelay", shared.as_ref(), async |w: &W| {
                raw_round(w, &load).await
            })
            .await
        },
    )
    .await?;
    if let Some(w) = shared {
        w.delete().await?;
    }
    Ok(figure
        .measurement(
            &ours,
            &raw,
            Target::at_least(0.9),
            Load::new(load.bytes, 1, 0, load.batch * 8, load.n),
        )
        .detail("batches_in_flight", 8)
        .note(CLUSTER_NOTE))
}

/// Fill the outbox (the slot exists: it reads the inserts), then time the relay from its
/// start until the broker confirmed every message; checks every message arrived.
async fn wal_round<W: RawRelay>(
    store: &PgStore,
    w: &W,
    load: &RelayLoad,
) -> Result<f64, BenchError> {
    let confirmed = Arc::new(AtomicUsize::new(0));
    let publisher = Arc::new(Counting {
        inner: w.transport().publisher(),
        confirmed: confirmed.clone(),
    });
    let elapsed = relay_backlog(store, publisher, load, &confirmed).await?;
    w.check_arrived(load.n, Some(confirmed.load(Ordering::Relaxed)))
        .await?;
    Ok(rate(load.n, elapsed))
}

/// Write the backlog, run the relay until `confirmed` reaches it, and say how long that took.
async fn relay_backlog<P: Publisher + ?Sized + 'static>(
    store: &PgStore,
    publisher: Arc<P>,
    load: &RelayLoad,
    confirmed: &AtomicUsize,
) -> Result<Duration, BenchError> {
    let relay = WalRelay::new(store, publisher, config(load)).ctx("the WAL relay")?;
    relay.prepare().await.ctx("preparing the slot")?;
    fill_outbox(store, load.n, |i| payload::message(i, load.bytes)).await?;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let task = tokio::spawn(async move { relay.run(rx).await });
    let deadline = started + timeout(load.n);
    while confirmed.load(Ordering::Relaxed) < load.n {
        if Instant::now() > deadline {
            let _ = stop.send(true);
            return Err(BenchError::Stalled(format!(
                "the WAL relay confirmed {} of {}",
                confirmed.load(Ordering::Relaxed),
                load.n
            )));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    task.await
        .map_err(|e| BenchError::Stalled(format!("relay task: {e}")))?;
    Ok(elapsed)
}

/// A broker that confirms at once.
struct Instantly;

#[async_trait]
impl Publisher for Instantly {
    async fn publish(&self, _: &OutgoingMessage) -> postroom_core::Result<()> {
        Ok(())
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<postroom_core::Result<()>> {
        messages.iter().map(|_| Ok(())).collect()
    }
}

/// The physical limit: the relay reading a backlog from its slot with no broker, beside the
/// server decoding the same rows through the SQL function (one peek over the whole backlog,
/// pgoutput, binary).
async fn decode(ctx: &Ctx, store: &PgStore) -> Result<Measurement, BenchError> {
    let load = load_of(ctx, ctx.args.messages());
    let mut ours = Vec::new();
    let mut raw = Vec::new();
    for _ in 0..ctx.args.rounds() {
        let confirmed = Arc::new(AtomicUsize::new(0));
        let publisher = Arc::new(Counting {
            inner: Arc::new(Instantly),
            confirmed: confirmed.clone(),
        });
        // A second slot created before the rows, for the server's own decoding of them.
        sqlx::query("SELECT pg_create_logical_replication_slot('bench_peek', 'pgoutput')")
            .execute(store.pool())
            .await
            .ctx("the peek slot")?;
        let elapsed = relay_backlog(store, publisher, &load, &confirmed).await?;
        ours.push(rate(load.n, elapsed));
        let started = Instant::now();
        let changes: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('bench_peek', NULL, NULL,
                 'proto_version', '1', 'publication_names', 'postroom_outbox_wal')",
        )
        .fetch_one(store.pool())
        .await
        .ctx("peeking the slot")?;
        raw.push(rate(load.n, started.elapsed()));
        sqlx::query("SELECT pg_drop_replication_slot('bench_peek')")
            .execute(store.pool())
            .await
            .ctx("dropping the peek slot")?;
        if changes < load.n as i64 {
            return Err(BenchError::Stalled(format!(
                "the peek decoded {changes} changes for {} rows",
                load.n
            )));
        }
    }
    Ok(Measurement::new(
        "wal_slot_decode",
        "wal-relay",
        "msg/s",
        payload::median(&ours),
        payload::median(&raw),
        "the server decoding the same rows alone: pg_logical_slot_peek_binary_changes (pgoutput) over the backlog, one call",
        Target::report(),
        Load::new(load.bytes, 1, 0, load.batch * 8, load.n),
    )
    .detail("postroom_rounds", &ours)
    .detail("raw_rounds", &raw)
    .note(CLUSTER_NOTE)
    .note("the relay's figure is its whole loop (streaming, decoding the rows, its window) with a publisher that confirms at once: the most any broker can get through it"))
}
