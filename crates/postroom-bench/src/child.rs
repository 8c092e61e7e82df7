//! The memory scenario's child processes: the bench re-runs its own executable with the same
//! arguments and `POSTROOM_BENCH_CHILD` set to a [`ChildSpec`]; [`crate::run`] sees it, runs
//! only that relay or consumer, prints one [`ChildResult`] line and exits. So each measured
//! component has a process (and a peak RSS) of its own.

use crate::error::{BenchError, Context};
use crate::scenarios::handler::{InboxHandler, Progress, consumer_config};
use crate::sys::{self, Rss};
use postroom_core::{Consumer, OutboxRelay, OutboxStore, RelayConfig};
use postroom_postgres::{PgStore, TablePrefix};
use postroom_rabbitmq::{
    Broker, ConfirmingPublisher, RabbitSubscriber, SubscriberOptions, TopologyConfig,
};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that carries the spec.
pub const CHILD_ENV: &str = "POSTROOM_BENCH_CHILD";
/// The prefix of the result line on the child's stdout.
pub const RESULT_PREFIX: &str = "POSTROOM_BENCH_CHILD_RESULT ";

/// Which component the child runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The outbox relay over the PostgreSQL backlog.
    Relay,
    /// The consumer over the RabbitMQ backlog.
    Consumer,
}

/// What a child does. It reaches the child through the environment, never its argv.
#[derive(Clone, Serialize, Deserialize)]
pub struct ChildSpec {
    /// Relay or consumer.
    pub role: Role,
    /// The bench database.
    pub pg_url: String,
    /// The broker.
    pub amqp: String,
    /// The workload's topology.
    pub topology: TopologyConfig,
    /// Longest run.
    pub secs: f64,
    /// Stop once this many messages were published or handled.
    pub expect: usize,
    /// Relay batch.
    pub batch: usize,
    /// Consumer prefetch.
    pub prefetch: u16,
    /// Consumer concurrency.
    pub concurrency: usize,
}

/// Hand-written: the URLs may hold passwords.
impl std::fmt::Debug for ChildSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildSpec")
            .field("role", &self.role)
            .field("pg_url", &postroom_ops::redact(&self.pg_url))
            .field("amqp", &postroom_ops::redact(&self.amqp))
            .field("expect", &self.expect)
            .finish_non_exhaustive()
    }
}

/// What a child measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildResult {
    /// Messages published (relay) or handled (consumer).
    pub processed: usize,
    /// Seconds it ran.
    pub secs: f64,
    /// Memory once connected, before work.
    pub start: Rss,
    /// Memory at the end (`hwm_kib` is the process's peak).
    pub end: Rss,
    /// Largest `VmRSS` seen by the 50 ms sampler.
    pub max_sampled_kib: u64,
}

/// The spec of this process, when it is a child.
#[must_use]
pub fn spec_from_env() -> Option<Result<ChildSpec, BenchError>> {
    let text = std::env::var(CHILD_ENV).ok()?;
    Some(serde_json::from_str(&text).map_err(|e| BenchError::Config(format!("{CHILD_ENV}: {e}"))))
}

/// Run the child's component and print its result line.
pub async fn run_child(spec: ChildSpec) -> Result<(), BenchError> {
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = tokio::spawn({
        let peak = peak.clone();
        async move {
            loop {
                peak.fetch_max(sys::rss().rss_kib, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    let broker = Broker::connect(&spec.amqp).await.ctx("child: broker")?;
    let publisher = Arc::new(ConfirmingPublisher::new(broker.clone(), &spec.topology));
    let pool = PgPoolOptions::new()
        .max_connections(spec.concurrency as u32 + 2)
        .connect(&spec.pg_url)
        .await
        .ctx("child: database")?;
    let start = sys::rss();
    let started = Instant::now();
    let limit = Duration::from_secs_f64(spec.secs);
    let processed = match spec.role {
        Role::Relay => {
            let store = Arc::new(PgStore::from_pool(pool, TablePrefix::default()).outbox());
            let relay = OutboxRelay::new(
                store.clone(),
                publisher,
                RelayConfig {
                    relay_id: "bench-memory".into(),
                    batch_size: spec.batch,
                    retention: None,
                    ..RelayConfig::default()
                },
            );
            let mut published = 0;
            while published < spec.expect && started.elapsed() < limit {
                let pass = relay.run_once().await.ctx("child: relay pass")?;
                published += pass.published;
                if pass.claimed == 0 && store.pending().await.ctx("pending")? == 0 {
                    break;
                }
            }
            published
        }
        Role::Consumer => {
            let progress = Arc::new(Progress::default());
            let handler = Arc::new(InboxHandler::new(pool, progress.clone()));
            let consumer = Arc::new(Consumer::new(consumer_config(spec.concurrency), handler));
            let sub = RabbitSubscriber::new(
                broker.clone(),
                publisher,
                &spec.topology,
                crate::resources::rabbit::CONSUMER,
                SubscriberOptions::new(spec.prefetch),
            )
            .ctx("child: subscriber")?;
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let task = tokio::spawn({
                let consumer = consumer.clone();
                async move { consumer.run(sub, stopped).await }
            });
            progress.wait_for(spec.expect, limit).await;
            let _ = stop.send(true);
            let _ = task.await;
            progress.done()
        }
    };
    let secs = started.elapsed().as_secs_f64();
    broker.close().await;
    sampler.abort();
    let result = ChildResult {
        processed,
        secs,
        start,
        end: sys::rss(),
        max_sampled_kib: peak.load(Ordering::Relaxed),
    };
    println!(
        "{RESULT_PREFIX}{}",
        serde_json::to_string(&result).unwrap_or_default()
    );
    Ok(())
}

/// Run this executable again as a child with `spec`; returns its result.
pub async fn spawn(spec: &ChildSpec) -> Result<ChildResult, BenchError> {
    let exe = std::env::current_exe().ctx("current executable")?;
    let out = tokio::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(CHILD_ENV, serde_json::to_string(spec).unwrap_or_default())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs_f64(spec.secs + 180.0), out)
        .await
        .map_err(|_| BenchError::Stalled("memory child did not finish".into()))?
        .ctx("running the memory child")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            BenchError::Stalled(format!(
                "the {:?} child gave no result (exit {:?})",
                spec.role, out.status
            ))
        })
}
