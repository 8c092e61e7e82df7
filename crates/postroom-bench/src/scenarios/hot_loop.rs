//! Scenario 5, no hot loop: the handler's PostgreSQL is down (its pool points at a port that
//! was just closed; the shared server is never touched) while a backlog waits. For
//! `--outage-secs` the consumer must stay cool: CPU ≤ 5 % of a core (this process's
//! user + system time from `/proc/self/stat`), and the broker may deliver at most
//! messages × stages times (no `nack(requeue)` loop: the delays live in the broker and the
//! circuit breaker pauses pulling).

use super::handler::{InboxHandler, Progress, consumer_config};
use super::timed::{Book, TimedSubscriber};
use crate::error::{BenchError, Context};
use crate::payload;
use crate::report::{Load, Measurement, Target};
use crate::resources::rabbit::Workload;
use crate::{Ctx, sys};
use postroom_core::{Consumer, RetryLadder};
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// CPU budget: percent of one core.
pub const CPU_BUDGET_PERCENT: f64 = 5.0;

/// A PostgreSQL URL on a local port nothing listens on.
pub fn closed_port_url() -> Result<String, BenchError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").ctx("finding a free port")?;
    let port = listener.local_addr().ctx("local address")?.port();
    drop(listener);
    Ok(format!("postgres://postgres@127.0.0.1:{port}/down"))
}

/// Run the outage.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let a = &ctx.args;
    let (messages, secs) = (a.outage_messages(), a.outage_secs());
    let ladder = RetryLadder::default();
    let stages = ladder.len();
    let w = Workload::create(&ctx.endpoints, "hotloop", &ladder.to_string()).await?;
    let ch = w.raw_confirm_channel().await?;
    w.raw_publish(&ch, &payload::messages(0, messages, a.payload_bytes), 500)
        .await?;
    let _ = ch.close(200, "filled").await;

    let down = PgPoolOptions::new()
        .max_connections(u32::from(a.concurrency))
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&closed_port_url()?)
        .ctx("lazy pool")?;
    let progress = Arc::new(Progress::default());
    let handler = Arc::new(InboxHandler::new(down, progress.clone()));
    let consumer = Arc::new(Consumer::new(
        consumer_config(usize::from(a.concurrency)),
        handler,
    ));
    let book = Arc::new(Book::default());
    let sub = TimedSubscriber::new(w.subscriber(a.prefetch)?, book.clone());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let cpu0 = sys::cpu_time();
    let started = Instant::now();
    let task = tokio::spawn({
        let consumer = consumer.clone();
        async move { consumer.run(sub, stopped).await }
    });
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let wall = started.elapsed();
    let cpu = sys::cpu_time().saturating_sub(cpu0);
    let _ = stop.send(true);
    let _ = task.await;
    w.delete().await?;

    let cpu_percent = cpu.as_secs_f64() / wall.as_secs_f64() * 100.0;
    let deliveries = book.deliveries();
    let stats = consumer.stats().snapshot();
    let load = Load::new(
        a.payload_bytes,
        usize::from(a.concurrency),
        usize::from(a.prefetch),
        1,
        messages,
    );
    let allowed = (messages * stages) as f64;
    Ok(vec![
        Measurement::new(
            "hot_loop_cpu",
            "hot-loop",
            "% core",
            cpu_percent,
            CPU_BUDGET_PERCENT,
            "budget: 5 % of one core",
            Target::at_most(1.0),
            load.clone(),
        )
        .detail("outage_secs", wall.as_secs_f64())
        .detail("cpu_secs", cpu.as_secs_f64())
        .detail("handled", progress.done())
        .detail("retries_by_stage", &stats.retries_by_stage)
        .detail("parked", &stats.parked_by_code)
        .note("CPU of the whole bench process (consumer, lapin I/O threads, runtime) while only this scenario runs"),
        Measurement::new(
            "hot_loop_deliveries",
            "hot-loop",
            "deliveries",
            deliveries as f64,
            allowed,
            "budget: messages x ladder stages",
            Target::at_most(1.0),
            load,
        )
        .detail("ladder", ladder.to_string())
        .detail("outage_secs", wall.as_secs_f64()),
    ])
}
