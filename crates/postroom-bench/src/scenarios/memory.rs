//! Scenario 6, memory: peak RSS of the relay over a PostgreSQL outbox backlog and of the
//! consumer over a RabbitMQ backlog (`--backlog`, default 1,000,000), each in a process of its
//! own (see [`crate::child`]), for up to `--memory-secs`. Target < 64 MiB each; the budget is
//! the baseline.

use super::broker::relay::fill_outbox;
use crate::Ctx;
use crate::child::{self, ChildResult, ChildSpec, Role};
use crate::error::{BenchError, Context};
use crate::payload;
use crate::report::{Load, Measurement, Target};
use crate::resources::rabbit::Workload;
use std::time::Instant;

/// The budget, MiB.
pub const BUDGET_MIB: f64 = 64.0;

/// Fill both backlogs and run the two children.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let a = &ctx.args;
    let backlog = a.backlog();
    let db = ctx.db()?;
    let w = Workload::create(&ctx.endpoints, "memory", "5s").await?;
    let store = db.store(4).await?;
    let t = Instant::now();
    fill_outbox(&store, backlog, |i| payload::message(i, a.payload_bytes)).await?;
    eprintln!(
        "postroom-bench: memory: {backlog} outbox rows in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let spec = |role| ChildSpec {
        role,
        pg_url: db.url().to_string(),
        amqp: ctx.endpoints.amqp.clone(),
        topology: w.config.clone(),
        secs: a.memory_secs(),
        expect: backlog,
        batch: usize::from(a.batch),
        prefetch: a.prefetch,
        concurrency: usize::from(a.concurrency),
    };
    let relay = child::spawn(&spec(Role::Relay)).await?;
    // The relay filled the queue with what it published; top it up to the full backlog.
    let t = Instant::now();
    let missing = backlog.saturating_sub(relay.processed);
    let ch = w.raw_confirm_channel().await?;
    for from in (0..missing).step_by(10_000) {
        let part = payload::messages(from, 10_000.min(missing - from), a.payload_bytes);
        w.raw_publish(&ch, &part, 1000).await?;
    }
    let _ = ch.close(200, "filled").await;
    eprintln!(
        "postroom-bench: memory: queue topped up with {missing} in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let consumer = child::spawn(&spec(Role::Consumer)).await?;
    sqlx::query("TRUNCATE postroom_outbox, postroom_inbox")
        .execute(store.pool())
        .await
        .ctx("emptying")?;
    store.pool().close().await;
    w.delete().await?;

    let load = |conc, prefetch, batch| Load::new(a.payload_bytes, conc, prefetch, batch, backlog);
    Ok(vec![
        measurement("memory_relay_rss", &relay, load(1, 0, usize::from(a.batch))),
        measurement(
            "memory_consumer_rss",
            &consumer,
            load(usize::from(a.concurrency), usize::from(a.prefetch), 1),
        ),
    ])
}

fn measurement(name: &str, r: &ChildResult, load: Load) -> Measurement {
    let mib = |kib: u64| kib as f64 / 1024.0;
    Measurement::new(
        name,
        "memory",
        "MiB",
        mib(r.end.hwm_kib.max(r.max_sampled_kib)),
        BUDGET_MIB,
        "budget: 64 MiB peak RSS (VmHWM), own process",
        Target::at_most(1.0),
        load,
    )
    .detail("rss_at_start_mib", mib(r.start.rss_kib))
    .detail("rss_at_end_mib", mib(r.end.rss_kib))
    .detail("processed", r.processed)
    .detail("secs", r.secs)
}
