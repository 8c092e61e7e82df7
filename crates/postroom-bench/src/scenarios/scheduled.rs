//! Scheduled sends: messages written into the embedded outbox (SQLite) with `outbox::schedule`,
//! their times spread over a window, published by the claiming relay whose idle wait is far
//! longer than the window. Lateness is the time the relay published a message (its row in the
//! embedded queue) less its time. None may go out early; the p99 lateness must stay within
//! 100 ms. The budget is the baseline; the ratio is p99 / budget (≤ 1).

use super::embedded_relay::open;
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::payload::{self, percentile};
use crate::report::{Load, Measurement, Target};
use postroom_core::chrono;
use postroom_core::{OutboxRelay, OutboxStore, RelayConfig};
use postroom_sqlite::outbox;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The p99 lateness a scheduled message may have, in milliseconds.
pub const BUDGET_MS: f64 = 100.0;

/// Schedule messages over a window and measure when the relay publishes them.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let n = a.messages().clamp(1, 2000);
    let window_ms: i64 = if a.quick { 2000 } else { 10_000 };
    let (_dir, store) = open().await?;
    let cfg = RelayConfig {
        relay_id: "bench-scheduled".into(),
        idle_wait: Duration::from_secs(60),
        retention: None,
        ..RelayConfig::default()
    };
    let relay = OutboxRelay::new(Arc::new(store.clone()), Arc::new(store.queue()), cfg);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move { relay.run(rx).await });
    // Written at once, due from 500 ms on over the window.
    let start = chrono::Utc::now().timestamp_millis() + 500;
    let mut tx = store.begin().await.ctx("begin")?;
    for (i, m) in payload::messages(0, n, a.payload_bytes)
        .into_iter()
        .enumerate()
    {
        let at = start + window_ms * i as i64 / n as i64;
        let at = chrono::DateTime::from_timestamp_millis(at).unwrap_or_default();
        outbox::schedule(&mut tx, &m.not_before(at))
            .await
            .ctx("schedule")?;
    }
    tx.commit().await.ctx("commit")?;
    let deadline = Instant::now() + Duration::from_millis(window_ms as u64) * 3;
    while store.pending().await.ctx("pending")? > 0 {
        if Instant::now() > deadline {
            let _ = stop.send(true);
            return Err(BenchError::Stalled(format!(
                "scheduled: {} of {n} rows still unpublished well past their time",
                store.pending().await.unwrap_or(0)
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(true);
    task.await
        .map_err(|e| BenchError::Stalled(format!("relay task: {e}")))?;
    let late: Vec<i64> = sqlx::query_scalar(
        "SELECT q.enqueued_at - o.not_before FROM postroom_queue q
         JOIN postroom_outbox o ON o.message_id = q.message_id",
    )
    .fetch_all(store.pool())
    .await
    .ctx("lateness")?;
    if late.len() != n {
        return Err(BenchError::Stalled(format!(
            "scheduled: {} of {n} messages reached the queue",
            late.len()
        )));
    }
    let early = late.iter().filter(|l| **l < 0).count();
    let mut v: Vec<f64> = late.iter().map(|l| *l as f64).collect();
    let p99 = percentile(&mut v, 99.0);
    let mut m = Measurement::new(
        "scheduled_lateness_p99",
        "scheduled",
        "ms",
        p99.max(0.0),
        BUDGET_MS,
        "budget: 100 ms after the message's time",
        Target::at_most(1.0),
        Load::new(a.payload_bytes, 1, 0, 100, n),
    )
    .detail("p50_ms", percentile(&mut v, 50.0))
    .detail("max_ms", percentile(&mut v, 100.0))
    .detail("early", early)
    .detail("window_ms", window_ms)
    .note("lateness is the relay's publish into the embedded queue less the message's time; the relay's idle wait is 60 s");
    if early > 0 {
        m.meets_target = Some(false);
        m = m.note(format!("{early} messages were published before their time"));
    }
    Ok(m)
}
