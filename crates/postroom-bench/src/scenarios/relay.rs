//! Scenario 1, relay: postroom's `OutboxRelay` from the PostgreSQL outbox to a RabbitMQ quorum
//! queue through the confirming publisher, beside a raw lapin loop publishing the same
//! payloads with pipelined confirms (the same window as the relay's batch). Target ≥ 90 %.

use super::rate;
use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::rabbit::Workload;
use crate::{Ctx, PG_FSYNC_NOTE};
use postroom_core::{OutboxRelay, OutboxStore, OutgoingMessage, Publisher, RelayConfig};
use postroom_postgres::{PgStore, commit, outbox};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The relay's publisher, counting confirmed messages so that the round can tell when it is
/// done without asking the database (a `count(*)` every few milliseconds would take
/// PostgreSQL's CPU away from the relay it measures).
pub struct Counting<P: ?Sized> {
    /// The publisher that confirms.
    pub inner: Arc<P>,
    /// Messages it confirmed.
    pub confirmed: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl<P: Publisher + ?Sized> Publisher for Counting<P> {
    async fn publish(&self, message: &OutgoingMessage) -> postroom_core::Result<()> {
        let r = self.inner.publish(message).await;
        if r.is_ok() {
            self.confirmed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<postroom_core::Result<()>> {
        let rs = self.inner.publish_batch(messages).await;
        let ok = rs.iter().filter(|r| r.is_ok()).count();
        self.confirmed.fetch_add(ok, Ordering::Relaxed);
        rs
    }
}

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let a = &ctx.args;
    let (n, batch, relays) = (a.messages(), usize::from(a.batch), usize::from(a.relays));
    let w = Workload::create(&ctx.endpoints, "relay", "5s").await?;
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
            "relay_pg_to_rabbitmq",
            "relay",
            "msg/s",
            median(&ours),
            median(&raw),
            "raw lapin loop, pipelined confirms, no database",
            Target::at_least(0.9),
            load,
        )
        .detail("postroom_rounds", &ours)
        .detail("raw_rounds", &raw)
        .note(PG_FSYNC_NOTE),
    ])
}

/// Fill the outbox, then time the relays until it is empty; checks every message reached the
/// queue.
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
            inner: w.publisher(),
            confirmed: confirmed.clone(),
        });
        let relay = OutboxRelay::new(ob.clone(), publisher, cfg);
        let rx = stop_rx.clone();
        // The loop users run: pipelined (publish n while marking n-1 and claiming n+1).
        tasks.push(tokio::spawn(async move { relay.run(rx).await }));
    }
    // Done when every row is confirmed by the broker and marked published.
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
    check_routed(w, n).await?;
    Ok(per_sec)
}

/// Time `relays` raw channels publishing the same payloads.
async fn raw_round(
    w: &Workload,
    n: usize,
    batch: usize,
    relays: usize,
    bytes: usize,
) -> Result<f64, BenchError> {
    let msgs = payload::outgoing(0, n, bytes);
    let mut channels = Vec::new();
    for _ in 0..relays {
        channels.push(w.raw_confirm_channel().await?);
    }
    let share = n.div_ceil(relays);
    let started = Instant::now();
    let results = futures::future::join_all(
        channels
            .iter()
            .zip(msgs.chunks(share))
            .map(|(ch, part)| w.raw_publish(ch, part, batch)),
    )
    .await;
    let per_sec = rate(n, started.elapsed());
    for r in results {
        r?;
    }
    for ch in channels {
        let _ = ch.close(200, "done").await;
    }
    check_routed(w, n).await?;
    Ok(per_sec)
}

/// Empty the outbox and write messages `0..n` made by `make` into it (500 a statement, 5000
/// a transaction; made a transaction at a time, so a backlog of millions fits in memory).
pub async fn fill_outbox(
    store: &PgStore,
    n: usize,
    make: impl Fn(usize) -> (OutgoingMessage, String),
) -> Result<(), BenchError> {
    sqlx::query("TRUNCATE postroom_outbox")
        .execute(store.pool())
        .await
        .ctx("emptying the outbox")?;
    for from in (0..n).step_by(5000) {
        let chunk: Vec<_> = (from..n.min(from + 5000)).map(&make).collect();
        let mut tx = store.begin().await.ctx("begin")?;
        for part in chunk.chunks(500) {
            outbox::enqueue_batch(&mut tx, store.prefix(), part)
                .await
                .ctx("filling the outbox")?;
        }
        commit(tx).await.ctx("commit")?;
    }
    // A production outbox has planner statistics; give the fresh rows some too.
    sqlx::query("ANALYZE postroom_outbox")
        .execute(store.pool())
        .await
        .ctx("analyze")?;
    Ok(())
}

async fn check_routed(w: &Workload, n: usize) -> Result<(), BenchError> {
    let got = w.purge().await? as usize;
    if got == n {
        Ok(())
    } else {
        Err(BenchError::Stalled(format!(
            "{got} of {n} messages reached the queue"
        )))
    }
}
