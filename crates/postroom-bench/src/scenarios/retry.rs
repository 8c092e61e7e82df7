//! Scenario 4, retry timing: many retries scheduled over the ladder through RabbitMQ's delay
//! stages (ack+publish: a confirmed copy to `<queue>.retry.<delay>`, TTL, dead-lettered back).
//! The handler fails transiently until the message has walked every stage. No retry may
//! arrive before its stage delay; the p99 lateness of the worst stage must stay within 10 % of
//! its delay, at least 200 ms. The budget is the baseline; the ratio is p99 / budget (≤ 1).

use super::timed::{Book, TimedSubscriber};
use crate::Ctx;
use crate::error::BenchError;
use crate::payload::{self, percentile};
use crate::report::{Load, Measurement, Target};
use crate::resources::rabbit::Workload;
use postroom_core::{
    BreakerConfig, Consumer, Handled, Handler, HandlerError, Incoming, RetryLadder, RetryPolicy,
    async_trait,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Fails until the last stage has been walked.
struct WalkTheLadder {
    stages: u32,
    progress: Arc<super::handler::Progress>,
}

#[async_trait]
impl Handler for WalkTheLadder {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        if m.attempt < self.stages {
            return Err(HandlerError::transient("bench_retry", "walking the ladder"));
        }
        self.progress.tick();
        Ok(Handled::Applied)
    }
}

/// The budget of a stage: 10 % of its delay, at least 200 ms.
#[must_use]
pub fn budget_ms(delay: Duration) -> f64 {
    (delay.as_secs_f64() * 100.0).max(200.0)
}

/// Schedule `--retries` retries and measure their arrival.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let ladder_text = a.retry_ladder();
    let ladder: RetryLadder = ladder_text
        .parse()
        .map_err(|e| BenchError::Config(format!("--retry-ladder {ladder_text:?}: {e}")))?;
    let stages = ladder.len();
    let messages = a.retries().div_ceil(stages).max(1);
    let w = Workload::create(&ctx.endpoints, "retry", &ladder_text).await?;

    let mut cfg = super::handler::consumer_config(usize::from(a.concurrency));
    cfg.retry = RetryPolicy {
        max_retries: stages as u32,
        max_age: None,
        jitter: 0.0,
        ..RetryPolicy::with_ladder(ladder.clone())
    };
    // Every delivery but the last fails on purpose: the breaker would pause on them.
    cfg.breaker = BreakerConfig {
        failure_threshold: 0,
        ..BreakerConfig::default()
    };
    let progress = Arc::new(super::handler::Progress::default());
    let handler = Arc::new(WalkTheLadder {
        stages: stages as u32,
        progress: progress.clone(),
    });
    let consumer = Arc::new(Consumer::new(cfg, handler));
    let book = Arc::new(Book::default());
    let sub = TimedSubscriber::new(w.subscriber(a.prefetch)?, book.clone());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn({
        let consumer = consumer.clone();
        async move { consumer.run(sub, stopped).await }
    });

    // First deliveries at the offered rate, in 100 ms slices.
    let started = Instant::now();
    let per_slice = (a.retry_rate / 10.0).max(1.0);
    let ch = w.raw_confirm_channel().await?;
    let msgs = payload::messages(0, messages, a.payload_bytes);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut sent = 0usize;
    while sent < messages {
        tick.tick().await;
        let due = ((started.elapsed().as_secs_f64() * 10.0 + 1.0) * per_slice) as usize;
        let upto = due.min(messages);
        if upto > sent {
            w.raw_publish(&ch, &msgs[sent..upto], 500).await?;
            sent = upto;
        }
    }
    let _ = ch.close(200, "done").await;
    let publish_secs = started.elapsed().as_secs_f64();
    let ladder_total: Duration = ladder.delays().iter().sum();
    let limit = ladder_total * 3 + Duration::from_secs(120);
    let done = progress.wait_for(messages, limit).await;
    let _ = stop.send(true);
    let _ = task.await;
    w.delete().await?;
    let stats = consumer.stats().snapshot();
    if !done {
        return Err(BenchError::Stalled(format!(
            "retry: {} of {messages} walked the ladder ({:?} retries so far)",
            progress.done(),
            stats.retries_by_stage
        )));
    }

    let arrivals = book.arrivals();
    let early = arrivals.iter().filter(|x| x.late_upper < 0.0).count();
    let maybe_early = arrivals.iter().filter(|x| x.late_lower < 0.0).count();
    let mut by_stage: BTreeMap<u128, Vec<f64>> = BTreeMap::new();
    for x in &arrivals {
        by_stage
            .entry(x.stage_delay.as_millis())
            .or_default()
            .push(x.late_upper.max(0.0));
    }
    let mut worst = (0.0, 1.0, 0.0);
    let mut per_stage = serde_json::Map::new();
    for (delay_ms, mut v) in by_stage {
        let budget = budget_ms(Duration::from_millis(delay_ms as u64));
        let p99 = percentile(&mut v, 99.0);
        if p99 / budget >= worst.2 {
            worst = (p99, budget, p99 / budget);
        }
        per_stage.insert(
            format!("{delay_ms}ms"),
            serde_json::json!({"count": v.len(), "p50_ms": percentile(&mut v, 50.0),
                "p99_ms": p99, "max_ms": percentile(&mut v, 100.0), "budget_ms": budget}),
        );
    }
    let load = Load::new(
        a.payload_bytes,
        usize::from(a.concurrency),
        usize::from(a.prefetch),
        1,
        messages,
    );
    let mut m = Measurement::new(
        "retry_lateness_p99",
        "retry",
        "ms",
        worst.0,
        worst.1,
        "budget: 10 % of the stage delay, floor 200 ms (worst stage)",
        Target::at_most(1.0),
        load,
    )
    .detail("ladder", ladder_text)
    .detail(
        "retries_scheduled",
        stats.retries_by_stage.values().sum::<u64>(),
    )
    .detail("retries_measured", arrivals.len())
    .detail("early", early)
    .detail("possibly_early", maybe_early)
    .detail("offered_rate_per_sec", a.retry_rate)
    .detail("publish_secs", publish_secs)
    .detail("per_stage", per_stage)
    .note("lateness is measured from the start of the retry publish (an upper bound)");
    if early > 0 {
        m.meets_target = Some(false);
        m = m.note(format!("{early} retries arrived before their stage delay"));
    }
    Ok(m)
}
