//! NATS relay: postroom's `OutboxRelay` from the PostgreSQL outbox to a JetStream stream
//! through the confirming publisher (`Nats-Msg-Id` = the message id, a batch in flight, the
//! PubAcks awaited), beside a raw async-nats loop publishing the same payloads with the same
//! header and the same window and waiting for the PubAcks. Target ≥ 90 %.

use super::rate;
use super::relay::{Counting, fill_outbox};
use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::nats::NatsWorkload;
use crate::{Ctx, PG_FSYNC_NOTE};
use postroom_core::{OutboxRelay, OutboxStore, RelayConfig};
use postroom_postgres::PgStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let a = &ctx.args;
    let (n, batch, relays) = (a.messages(), usize::from(a.batch), usize::from(a.relays));
    let w = NatsWorkload::create(&ctx.endpoints, "relay").await?;
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
            "relay_pg_to_nats",
            "nats-relay",
            "msg/s",
            median(&ours),
            median(&raw),
            "raw async-nats loop: publish with Nats-Msg-Id, wait for the PubAcks, same window, no database",
            Target::at_least(0.9),
            load,
        )
        .detail("postroom_rounds", &ours)
        .detail("raw_rounds", &raw)
        .note(PG_FSYNC_NOTE),
    ])
}

/// Fill the outbox, then time the relays until it is empty; checks every message reached the
/// stream.
async fn postroom_round(
    store: &PgStore,
    w: &NatsWorkload,
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
            relay_id: format!("bench-nats-{i}"),
            batch_size: batch,
            retention: None,
            ..RelayConfig::default()
        };
        let publisher = Arc::new(Counting {
            inner: w.publisher(),
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
    let per_sec = rate(n, elapsed);
    check_stored(w, n).await?;
    Ok(per_sec)
}

/// Time `relays` raw publishers sending the same payloads over one raw connection.
async fn raw_round(
    w: &NatsWorkload,
    n: usize,
    batch: usize,
    relays: usize,
    bytes: usize,
) -> Result<f64, BenchError> {
    let msgs = payload::outgoing(0, n, bytes);
    let share = n.div_ceil(relays);
    let started = Instant::now();
    let results =
        futures::future::join_all(msgs.chunks(share).map(|part| w.raw_publish(part, batch))).await;
    let per_sec = rate(n, started.elapsed());
    for r in results {
        r?;
    }
    check_stored(w, n).await?;
    Ok(per_sec)
}

async fn check_stored(w: &NatsWorkload, n: usize) -> Result<(), BenchError> {
    let got = w.purge().await?;
    if got == n as u64 {
        Ok(())
    } else {
        Err(BenchError::Stalled(format!(
            "{got} of {n} messages reached the stream"
        )))
    }
}
