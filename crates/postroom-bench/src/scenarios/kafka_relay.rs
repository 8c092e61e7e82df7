//! Relay to Kafka: postroom's `OutboxRelay` from the PostgreSQL outbox to a Kafka topic through
//! the idempotent, confirming producer, beside a raw rdkafka producer loop of the same settings
//! publishing the same payloads to the same topic, a window of `--batch` records in flight
//! (the relay's batch), each record's delivery report waited for. Target ≥ 90 %.

use super::rate;
use super::relay::{Counting, fill_outbox};
use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::kafka::Workload;
use crate::{Ctx, PG_FSYNC_NOTE};
use postroom_core::{OutboxRelay, OutboxStore, RelayConfig, Transport};
use postroom_postgres::PgStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let a = &ctx.args;
    let (n, batch, relays) = (a.messages(), usize::from(a.batch), usize::from(a.relays));
    let w = Workload::create(&ctx.endpoints, "relay").await?;
    let store = ctx.db()?.store(u32::from(a.relays) + 2).await?;
    let (ours, raw) = super::alternate(
        a.rounds(),
        async || postroom_round(&store, &w, n, batch, relays, a.payload_bytes).await,
        async || raw_round(&w, n, batch, relays, a.payload_bytes).await,
    )
    .await?;
    store.pool().close().await;
    w.delete().await?;
    let load = Load::new(a.payload_bytes, relays, 0, batch, n);
    Ok(vec![
        Measurement::new(
            "relay_pg_to_kafka",
            "relay",
            "msg/s",
            median(&ours),
            median(&raw),
            "raw rdkafka idempotent producer loop, same topic, a batch in flight, no database",
            Target::at_least(0.9),
            load,
        )
        .detail("postroom_rounds", &ours)
        .detail("raw_rounds", &raw)
        .note(PG_FSYNC_NOTE),
    ])
}

/// Fill the outbox, then time the relays until it is empty; checks every message reached the
/// topic.
async fn postroom_round(
    store: &PgStore,
    w: &Workload,
    n: usize,
    batch: usize,
    relays: usize,
    bytes: usize,
) -> Result<f64, BenchError> {
    fill_outbox(store, n, |i| payload::message(i, bytes)).await?;
    let ob: Arc<dyn OutboxStore> = Arc::new(store.outbox());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let confirmed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..relays {
        let cfg = RelayConfig {
            relay_id: format!("bench-{i}"),
            batch_size: batch,
            retention: None,
            ..RelayConfig::default()
        };
        let publisher = Arc::new(Counting {
            inner: w.transport.publisher(),
            confirmed: confirmed.clone(),
        });
        let relay = OutboxRelay::new(ob.clone(), publisher, cfg);
        let rx = stop_rx.clone();
        tasks.push(tokio::spawn(async move { relay.run(rx).await }));
    }
    while confirmed.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    while ob.pending().await.ctx("pending rows")? > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("relay task: {e}")))?;
    }
    check_routed(confirmed.load(Ordering::Relaxed), n)?;
    Ok(rate(n, elapsed))
}

/// Time `relays` raw producers publishing the same payloads.
async fn raw_round(
    w: &Workload,
    n: usize,
    batch: usize,
    relays: usize,
    bytes: usize,
) -> Result<f64, BenchError> {
    let msgs = payload::outgoing(0, n, bytes);
    let producers = (0..relays)
        .map(|_| w.raw_producer())
        .collect::<Result<Vec<_>, _>>()?;
    // Connected (and given a producer id) before the clock starts, like postroom's producer.
    for p in &producers {
        w.raw_publish(p, &payload::outgoing(n, 1, bytes), 1).await?;
    }
    let share = n.div_ceil(relays);
    let started = Instant::now();
    let results = futures::future::join_all(
        producers
            .iter()
            .zip(msgs.chunks(share))
            .map(|(p, part)| w.raw_publish(p, part, batch)),
    )
    .await;
    let per_sec = rate(n, started.elapsed());
    for r in results {
        r?;
    }
    Ok(per_sec)
}

/// Every message was acknowledged by the broker (the delivery reports counted above); the
/// topic's end offset is no witness on the test broker, which reports it short of what it
/// acknowledged after batched produce requests.
fn check_routed(confirmed: usize, n: usize) -> Result<(), BenchError> {
    if confirmed == n {
        Ok(())
    } else {
        Err(BenchError::Stalled(format!(
            "{confirmed} of {n} messages were acknowledged"
        )))
    }
}
