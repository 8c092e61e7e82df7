//! SQS relay: postroom's `OutboxRelay` from the PostgreSQL outbox through the SQS publisher
//! (`SendMessageBatch`, ten entries a call, every entry's result checked, the envelope's
//! fields as message attributes), beside a raw loop sending the same bodies with
//! `SendMessageBatch` (ten a call, no attributes, no database). Target ≥ 0.9.

use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::sqs::SqsWorkload;
use crate::scenarios::rate;
use crate::scenarios::relay::{Counting, fill_outbox};
use crate::{Ctx, PG_FSYNC_NOTE};
use postroom_core::{OutboxRelay, OutboxStore, OutgoingMessage, RelayConfig, Transport};
use postroom_postgres::PgStore;
use postroom_sqs::aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use postroom_sqs::error::sdk;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let (n, batch, relays) = (a.messages(), usize::from(a.batch), usize::from(a.relays));
    let store = ctx.db()?.store(u32::from(a.relays) + 2).await?;
    // Queues of its own for every round.
    let (ours, raw) = crate::scenarios::alternate(
        a.rounds(),
        async || {
            let w = SqsWorkload::create("relay").await?;
            let r = postroom_round(&store, &w, n, batch, relays, a.payload_bytes).await;
            w.delete().await?;
            r
        },
        async || {
            let w = SqsWorkload::create("relay").await?;
            let r = raw_round(&w, n, relays, a.payload_bytes).await;
            w.delete().await?;
            r
        },
    )
    .await?;
    store.pool().close().await;
    Ok(Measurement::new(
        "relay_pg_to_sqs",
        "sqs",
        "msg/s",
        median(&ours),
        median(&raw),
        "raw SendMessageBatch loop (10 per call, as many senders as relays), no database",
        Target::at_least(0.9),
        Load::new(a.payload_bytes, relays, 0, batch, n),
    )
    .detail("postroom_rounds", &ours)
    .detail("raw_rounds", &raw)
    .note(PG_FSYNC_NOTE))
}

async fn postroom_round(
    store: &PgStore,
    w: &SqsWorkload,
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
            relay_id: format!("bench-sqs-{i}"),
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
    let deadline = Instant::now() + crate::scenarios::consumer::timeout(n);
    while confirmed.load(Ordering::Relaxed) < n || ob.pending().await.ctx("pending rows")? > 0 {
        if Instant::now() > deadline {
            let _ = stop.send(true);
            return Err(BenchError::Stalled(format!(
                "the SQS relay confirmed {} of {n}",
                confirmed.load(Ordering::Relaxed)
            )));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("relay task: {e}")))?;
    }
    w.expect(n as u64).await?;
    Ok(rate(n, elapsed))
}

/// Send `part` ten at a time; every entry must succeed.
async fn raw_send(w: &SqsWorkload, part: &[OutgoingMessage]) -> Result<(), BenchError> {
    for chunk in part.chunks(10) {
        let mut req = w.client.send_message_batch().queue_url(&w.work_url);
        for (i, m) in chunk.iter().enumerate() {
            req = req.entries(
                SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(String::from_utf8_lossy(&m.body))
                    .build()
                    .map_err(|e| BenchError::Config(format!("raw entry: {e}")))?,
            );
        }
        let out = req
            .send()
            .await
            .map_err(|e| sdk("raw SendMessageBatch", e))
            .ctx("SQS")?;
        if !out.failed().is_empty() {
            return Err(BenchError::Stalled(format!(
                "raw SendMessageBatch: {} entries failed",
                out.failed().len()
            )));
        }
    }
    Ok(())
}

async fn raw_round(
    w: &SqsWorkload,
    n: usize,
    relays: usize,
    bytes: usize,
) -> Result<f64, BenchError> {
    let msgs = payload::outgoing(0, n, bytes);
    let share = n.div_ceil(relays);
    let started = Instant::now();
    let results = futures::future::join_all(msgs.chunks(share).map(|part| raw_send(w, part))).await;
    let per_sec = rate(n, started.elapsed());
    for r in results {
        r?;
    }
    w.expect(n as u64).await?;
    Ok(per_sec)
}
