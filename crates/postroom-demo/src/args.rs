//! The command-line arguments of `demo`, `soak` and their child processes (clap derive; the
//! `postroom` binary mounts them as subcommands). Database and broker URLs may hold a
//! password: they are [`UrlText`] (whose `Debug` is redacted), their environment variables'
//! values are never shown in `--help`, and the child processes receive them only through
//! their environment.

use clap::Args;
use postroom_ops::UrlText;
use postroom_ops::limits::{parse_rate_or_unpaced, parse_seconds, parse_share};
use std::path::PathBuf;

/// `postroom demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Database: a SQLite file (recreated on each run and kept afterwards, so that
    /// `postroom parking list --database FILE` can look at it) or a postgres:// URL (the demo
    /// then uses its own tables: shop_* and postroom_demo_*).
    #[arg(
        long,
        env = "POSTROOM_DATABASE",
        hide_env_values = true,
        default_value = "postroom-demo.db"
    )]
    pub database: UrlText,
    /// Broker URL (the forms this build opens are listed in `--help`). Without it the queue
    /// lives in the database.
    #[arg(long, env = "POSTROOM_BROKER", hide_env_values = true, help = format!(
        "Broker URL: {}. Without it the queue lives in the database. RabbitMQ's management API is \
         taken from POSTROOM_BROKER_API, or the same host on port 15672 (https on 15671 for an \
         amqps:// broker)", postroom::registry::broker_forms()))]
    pub broker: Option<UrlText>,
    /// Number of orders to create (at least 16, so that every fault has an order).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(16..=100_000))]
    pub orders: u32,
    /// Retry ladder (scaled down from the production 5s,30s,5m so the demo ends within a minute).
    #[arg(long, default_value = "1s,2s,4s")]
    pub ladder: String,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub report_json: Option<PathBuf>,
    /// Give up if the demo has not settled within this many seconds.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout_secs: u64,
    /// Prefix of the queues and exchanges the demo owns on a broker (deleted and declared
    /// afresh on each run).
    #[arg(long, default_value = "postroom-demo", value_name = "PREFIX", value_parser = parse_workload)]
    pub workload: String,
    /// Move the inventory and orders feeds from --broker to this broker mid-run (the runbook
    /// of docs/migration-nats-to-kafka.md, step by step): the relay publishes to both, a
    /// consumer on the new broker starts beside the old one, one consumer of each is
    /// SIGKILLed during the overlap, the old feed is drained and stopped, then publishing to
    /// the old broker stops.
    #[arg(long, value_name = "URL", requires = "broker")]
    pub migrate_to: Option<UrlText>,
}

/// What every child process of `demo` and `soak` is given.
#[derive(Debug, Args, Clone)]
pub struct ChildArgs {
    /// Database (from the parent, through the environment).
    #[arg(long, env = "POSTROOM_DATABASE", hide_env_values = true)]
    pub database: UrlText,
    /// Broker (from the parent, through the environment).
    #[arg(long, env = "POSTROOM_BROKER", hide_env_values = true)]
    pub broker: Option<UrlText>,
    /// Retry ladder.
    #[arg(long)]
    pub ladder: String,
    /// Queue and exchange prefix on a broker.
    #[arg(long)]
    pub workload: String,
}

/// `postroom demo-consumer` (started and killed by `demo`).
#[derive(Debug, Args)]
pub struct DemoConsumerArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub child: ChildArgs,
    /// Order whose handling stops after COMMIT and before the ack, so it can be killed.
    #[arg(long)]
    pub crash_order: Option<String>,
}

/// `postroom soak`.
#[derive(Debug, Args, Clone)]
pub struct SoakArgs {
    /// Database: a SQLite file (recreated) or a postgres:// URL (uses its own tables).
    #[arg(
        long,
        env = "POSTROOM_DATABASE",
        hide_env_values = true,
        default_value = "postroom-soak.db"
    )]
    pub database: UrlText,
    /// Broker URL (the forms this build opens are listed in `--help`). Without it the queue
    /// lives in the database.
    #[arg(long, env = "POSTROOM_BROKER", hide_env_values = true, help = format!(
        "Broker URL: {}. Without it the queue lives in the database. RabbitMQ's management API is \
         taken from POSTROOM_BROKER_API or the same host on port 15672",
        postroom::registry::broker_forms()))]
    pub broker: Option<UrlText>,
    /// Restart the broker once mid-run: with --restart-command, or the transport's own way
    /// (RabbitMQ: `rabbitmqctl stop_app` / `start_app`; needs rabbitmqctl on this machine).
    #[arg(long)]
    pub restart_broker: bool,
    /// Shell command (run with `sh -c`) that restarts the broker, for --restart-broker: for a
    /// transport the soak cannot restart by itself (NATS), or a broker run some other way.
    #[arg(long, value_name = "COMMAND")]
    pub restart_command: Option<String>,
    /// Messages to produce (order events and poison).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..=100_000_000))]
    pub messages: u64,
    /// Messages per second the producer writes (0: as fast as it can). A steady rate keeps a
    /// broker's backlog shallow, as a service in production would.
    #[arg(long, default_value_t = 0.0, value_parser = parse_rate_or_unpaced)]
    pub rate: f64,
    /// Seconds between kills (SIGKILL of a random relay or consumer process, then a restart). 0: no kills.
    #[arg(long, default_value_t = 2.0, value_parser = parse_seconds)]
    pub kill_every: f64,
    /// Relay processes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub relays: u32,
    /// Consumer processes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub consumers: u32,
    /// Share of messages whose handler fails transiently on its first two attempts.
    #[arg(long, default_value_t = 0.05, value_parser = parse_share)]
    pub transient_share: f64,
    /// Share of messages that are poison (undecodable: parked at once).
    #[arg(long, default_value_t = 0.005, value_parser = parse_share)]
    pub poison_share: f64,
    /// Share of orders that are out of stock (a business outcome through the consumer's outbox).
    #[arg(long, default_value_t = 0.02, value_parser = parse_share)]
    pub out_of_stock_share: f64,
    /// Share of orders cancelled right after (aggregate version 2; the version guard orders them).
    #[arg(long, default_value_t = 0.05, value_parser = parse_share)]
    pub cancel_share: f64,
    /// Retry ladder of the consumers.
    #[arg(long, default_value = "250ms,1s,3s")]
    pub ladder: String,
    /// The inventory consumers apply up to this many messages in one transaction (the batched
    /// consumer, per-key ordered). 0: one transaction per message.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub batch_size: u32,
    /// Give up if the run has not settled within this many seconds.
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub timeout_secs: u64,
    /// Write the summary as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Prefix of the queues and exchanges the soak owns on a broker (deleted and declared
    /// afresh on each run).
    #[arg(long, default_value = "postroom-soak", value_name = "PREFIX", value_parser = parse_workload)]
    pub workload: String,
}

/// `postroom soak-worker` (started and killed by `soak`).
#[derive(Debug, Args, Clone)]
pub struct SoakWorkerArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub child: ChildArgs,
    /// producer, relay or consumer.
    #[arg(long, value_parser = ["producer", "relay", "consumer"])]
    pub role: String,
    /// Worker number.
    #[arg(long, default_value_t = 0)]
    pub id: u32,
    /// Messages to produce (producer).
    #[arg(long, default_value_t = 0)]
    pub messages: u64,
    /// Messages per second (producer; 0: as fast as it can).
    #[arg(long, default_value_t = 0.0, value_parser = parse_rate_or_unpaced)]
    pub rate: f64,
    /// Shares, as in `soak`.
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    pub transient_share: f64,
    /// Poison share.
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    pub poison_share: f64,
    /// Out-of-stock share.
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    pub out_of_stock_share: f64,
    /// Cancel share.
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    pub cancel_share: f64,
    /// Messages per inventory transaction (consumer; 0: one transaction per message).
    #[arg(long, default_value_t = 0)]
    pub batch_size: u32,
}

/// A run's workload prefix: never empty, since the run deletes what it names and, without a
/// prefix, would name a broker's plain `inventory` and `orders` queues.
fn parse_workload(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("the workload prefix must not be empty: the run deletes and recreates what it names, and without a prefix that would be the broker's plain `inventory` and `orders`".into());
    }
    Ok(s.to_string())
}
