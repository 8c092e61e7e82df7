//! Scenario 3, end-to-end latency at a fixed offered rate below saturation: from the outbox
//! commit to the handler's start, through RabbitMQ and postroom's consumer, two ways: the
//! relay (woken by NOTIFY) sends each row, or the producer sends its rows itself right after
//! its commit (`outbox::enqueue_to_send` + `OutboxSender`, the relay running beside it as the
//! fallback); beside a raw lapin producer and consumer at the same rate, from the start of
//! the publish to the delivery. p50 / p99 / max are reported; the target is 1.5× the raw p99.

use super::handler::{InboxHandler, Progress, consumer_config};
use crate::error::{BenchError, Context};
use crate::payload::{self, percentile};
use crate::report::{Load, Measurement, Target};
use crate::resources::rabbit::{Workload, raw_publish};
use crate::{Ctx, PG_FSYNC_NOTE};
use futures::StreamExt;
use lapin::options::BasicAckOptions;
use postroom_core::{
    Consumer, Handled, Handler, HandlerError, Incoming, MessageId, OutboxRelay, RelayConfig,
    async_trait,
};
use postroom_postgres::outbox::OutboxSender;
use postroom_postgres::{PgStore, commit, outbox};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Sent = Arc<Mutex<HashMap<MessageId, Instant>>>;
type Samples = Arc<Mutex<Vec<f64>>>;

/// Measure the three paths at `--latency-rate` for `--latency-secs`.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let a = &ctx.args;
    let secs = a.latency_secs();
    let total = ((a.latency_rate * secs).ceil() as usize).max(1);
    let interval = Duration::from_secs_f64(1.0 / a.latency_rate.max(0.001));
    let w = Workload::create(&ctx.endpoints, "latency", "5s").await?;
    let store = ctx.db()?.store(u32::from(a.concurrency) + 4).await?;
    let mut raw = raw_path(&w, total, interval, a.prefetch, a.payload_bytes).await?;
    let mut ours = postroom_path(&w, &store, total, interval, a, false).await?;
    let mut sent_at_commit = postroom_path(&w, &store, total, interval, a, true).await?;
    store.pool().close().await;
    w.delete().await?;
    let summary = |v: &mut Vec<f64>| {
        serde_json::json!({
            "p50_ms": percentile(v, 50.0),
            "p99_ms": percentile(v, 99.0),
            "max_ms": percentile(v, 100.0),
            "samples": v.len(),
        })
    };
    let raw_p99 = percentile(&mut raw, 99.0);
    let load = Load::new(
        a.payload_bytes,
        usize::from(a.concurrency),
        usize::from(a.prefetch),
        usize::from(a.batch),
        total,
    );
    let mut measure = |name: &str, ours: &mut Vec<f64>, target: Target| {
        Measurement::new(
            name,
            "latency",
            "ms",
            percentile(ours, 99.0),
            raw_p99,
            "raw publish start to raw delivery, same rate, no outbox",
            target,
            load.clone(),
        )
        .detail("offered_rate_per_sec", a.latency_rate)
        .detail("postroom", summary(ours))
        .detail("raw", summary(&mut raw))
        .note(PG_FSYNC_NOTE)
    };
    Ok(vec![
        measure("latency_e2e_p99", &mut ours, Target::report()),
        measure(
            "latency_send_after_commit_p99",
            &mut sent_at_commit,
            Target::at_most(1.5),
        ),
    ])
}

struct Timing<H> {
    inner: H,
    sent: Sent,
    samples: Samples,
}

#[async_trait]
impl<H: Handler> Handler for Timing<H> {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let now = Instant::now();
        // The producer records the commit right after it returns; the message cannot
        // normally overtake it, but wait a little if it did.
        for _ in 0..100 {
            let at = self.sent.lock().expect("sent").remove(&m.envelope.id);
            if let Some(at) = at {
                let ms = now.duration_since(at).as_secs_f64() * 1000.0;
                self.samples.lock().expect("samples").push(ms);
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.inner.handle(m).await
    }
}

async fn postroom_path(
    w: &Workload,
    store: &PgStore,
    total: usize,
    interval: Duration,
    a: &crate::BenchArgs,
    send_after_commit: bool,
) -> Result<Vec<f64>, BenchError> {
    let (sent, samples): (Sent, Samples) = Default::default();
    let progress = Arc::new(Progress::default());
    let handler = Arc::new(Timing {
        inner: InboxHandler::new(store.pool().clone(), progress.clone()),
        sent: sent.clone(),
        samples: samples.clone(),
    });
    let consumer = Arc::new(Consumer::new(
        consumer_config(usize::from(a.concurrency)),
        handler,
    ));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let consumer_task = tokio::spawn({
        let (consumer, sub, stopped) =
            (consumer.clone(), w.subscriber(a.prefetch)?, stopped.clone());
        async move { consumer.run(sub, stopped).await }
    });
    let sender = Arc::new(OutboxSender::new(Arc::new(store.outbox()), w.publisher()));
    let relay = OutboxRelay::new(
        Arc::new(store.outbox()),
        w.publisher(),
        RelayConfig {
            relay_id: "bench-latency".into(),
            batch_size: usize::from(a.batch),
            retention: None,
            ..RelayConfig::default()
        },
    );
    let relay_task = tokio::spawn(async move { relay.run(stopped).await });
    // Let the consumer and the relay's LISTEN settle before the clock starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut tick = tokio::time::interval(interval);
    let mut producers = Vec::with_capacity(total);
    for m in payload::messages(0, total, a.payload_bytes) {
        tick.tick().await;
        let (store, sent, sender) = (store.clone(), sent.clone(), sender.clone());
        producers.push(tokio::spawn(async move {
            let mut tx = store.begin().await.ctx("begin")?;
            let id = m.id;
            let to_send = if send_after_commit {
                let rows = [m];
                let lease = Duration::from_secs(30);
                let to_send = outbox::enqueue_to_send(
                    &mut tx,
                    store.prefix(),
                    &rows,
                    "bench-producer",
                    lease,
                )
                .await
                .ctx("enqueue to send")?;
                Some(to_send)
            } else {
                outbox::enqueue(&mut tx, store.prefix(), &m)
                    .await
                    .ctx("enqueue")?;
                None
            };
            commit(tx).await.ctx("commit")?;
            sent.lock().expect("sent").insert(id, Instant::now());
            if let Some(rows) = to_send {
                sender.send(rows).await.ctx("send after commit")?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    for p in producers {
        p.await
            .map_err(|e| BenchError::Stalled(format!("producer: {e}")))??;
    }
    let done = progress.wait_for(total, Duration::from_secs(60)).await;
    let _ = stop.send(true);
    let _ = consumer_task.await;
    let _ = relay_task.await;
    if !done {
        return Err(BenchError::Stalled(format!(
            "latency: {} of {total} handled",
            progress.done()
        )));
    }
    let v = samples.lock().expect("samples").clone();
    Ok(v)
}

async fn raw_path(
    w: &Workload,
    total: usize,
    interval: Duration,
    prefetch: u16,
    bytes: usize,
) -> Result<Vec<f64>, BenchError> {
    let sent: Sent = Sent::default();
    let (ch, mut stream) = w.raw_consumer(prefetch, "raw-latency").await?;
    let consumer = tokio::spawn({
        let sent = sent.clone();
        async move {
            let mut samples = Vec::with_capacity(total);
            while samples.len() < total {
                let next = tokio::time::timeout(Duration::from_secs(60), stream.next()).await;
                let Ok(Some(Ok(d))) = next else { break };
                let now = Instant::now();
                let id = d
                    .properties
                    .message_id()
                    .as_ref()
                    .and_then(|s| s.as_str().parse::<MessageId>().ok());
                if let Some(at) = id.and_then(|id| sent.lock().expect("sent").remove(&id)) {
                    samples.push(now.duration_since(at).as_secs_f64() * 1000.0);
                }
                let _ = d.acker.ack(BasicAckOptions::default()).await;
            }
            samples
        }
    });
    let pch = w.raw_confirm_channel().await?;
    let mut tick = tokio::time::interval(interval);
    for m in payload::messages(0, total, bytes) {
        tick.tick().await;
        sent.lock().expect("sent").insert(m.id, Instant::now());
        raw_publish(&pch, &w.config.exchange, std::slice::from_ref(&m), 1).await?;
    }
    let samples = consumer
        .await
        .map_err(|e| BenchError::Stalled(format!("raw consumer: {e}")))?;
    let _ = ch.close(200, "done").await;
    let _ = pch.close(200, "done").await;
    if samples.len() < total {
        return Err(BenchError::Stalled(format!(
            "raw latency: {} of {total} delivered",
            samples.len()
        )));
    }
    Ok(samples)
}
