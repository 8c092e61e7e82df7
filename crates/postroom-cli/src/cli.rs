//! Command-line definitions (clap derive).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// postroom: reliable asynchronous messaging — transactional outbox, confirmed relay, inbox,
/// delayed retries in the broker, a parking lot you can search and redrive.
#[derive(Debug, Parser)]
#[command(name = "postroom", version, propagate_version = true)]
pub struct Cli {
    /// Config file (TOML). Default: ./postroom.toml when it exists.
    #[arg(long, global = true, env = "POSTROOM_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format for diagnostics on stderr.
    #[arg(long, global = true, env = "POSTROOM_LOG_FORMAT", value_parser = ["text", "json"], default_value = "text")]
    pub log_format: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the orders → inventory example end to end on the embedded store, with the source
    /// article's faults injected, and check that nothing is lost or applied twice.
    Demo(DemoArgs),
    /// Inspect and redrive parked (dead-lettered) messages.
    #[command(subcommand)]
    Parking(ParkingCommand),
    /// Measure relay, consumer, latency, retry timing, hot-loop and memory figures beside raw
    /// baselines run in the same process, and print the ratios against their targets.
    Bench(postroom_bench::BenchArgs),
    /// Plan and apply the RabbitMQ topology (exchanges, quorum queues, retry stages, parking,
    /// and the policies that set TTL, dead-lettering, overflow and delivery limits).
    #[command(subcommand)]
    Topology(TopologyCommand),
    /// Run producer, relay and consumer processes while killing them with SIGKILL at random,
    /// then check from the databases that nothing was lost or applied twice.
    Soak(SoakArgs),
    /// The demo's inventory consumer process (started and killed by `demo`).
    #[command(hide = true)]
    DemoConsumer(DemoConsumerArgs),
    /// A soak process: producer, relay or consumer (started and killed by `soak`).
    #[command(hide = true)]
    SoakWorker(SoakWorkerArgs),
}

/// `postroom soak`.
#[derive(Debug, Args, Clone)]
pub struct SoakArgs {
    /// Database: a SQLite file (recreated) or a postgres:// URL (uses its own tables).
    #[arg(long, env = "POSTROOM_DATABASE", default_value = "postroom-soak.db")]
    pub database: String,
    /// RabbitMQ URL (amqp://user:pass@host:5672/%2f). Without it the queue lives in the database.
    /// The management API is taken from POSTROOM_BROKER_API or the same host on port 15672.
    #[arg(long, env = "POSTROOM_BROKER")]
    pub broker: Option<String>,
    /// Restart the broker once mid-run (RabbitMQ: `rabbitmqctl stop_app` / `start_app`; needs rabbitmqctl on this machine).
    #[arg(long)]
    pub restart_broker: bool,
    /// Messages to produce (order events and poison).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..))]
    pub messages: u64,
    /// Seconds between kills (SIGKILL of a random relay or consumer process, then a restart). 0: no kills.
    #[arg(long, default_value_t = 2.0)]
    pub kill_every: f64,
    /// Relay processes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub relays: u32,
    /// Consumer processes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub consumers: u32,
    /// Share of messages whose handler fails transiently on its first two attempts.
    #[arg(long, default_value_t = 0.05)]
    pub transient_share: f64,
    /// Share of messages that are poison (undecodable: parked at once).
    #[arg(long, default_value_t = 0.005)]
    pub poison_share: f64,
    /// Share of orders that are out of stock (a business outcome through the consumer's outbox).
    #[arg(long, default_value_t = 0.02)]
    pub out_of_stock_share: f64,
    /// Share of orders cancelled right after (aggregate version 2; the version guard orders them).
    #[arg(long, default_value_t = 0.05)]
    pub cancel_share: f64,
    /// Retry ladder of the consumers.
    #[arg(long, default_value = "250ms,1s,3s")]
    pub ladder: String,
    /// Give up if the run has not settled within this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
    /// Write the summary as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

/// `postroom soak-worker` (internal).
#[derive(Debug, Args, Clone)]
pub struct SoakWorkerArgs {
    /// producer, relay or consumer.
    #[arg(long, value_parser = ["producer", "relay", "consumer"])]
    pub role: String,
    /// Database.
    #[arg(long)]
    pub database: String,
    /// RabbitMQ URL.
    #[arg(long)]
    pub broker: Option<String>,
    /// Worker number.
    #[arg(long, default_value_t = 0)]
    pub id: u32,
    /// Messages to produce (producer).
    #[arg(long, default_value_t = 0)]
    pub messages: u64,
    /// Shares, as in `soak`.
    #[arg(long, default_value_t = 0.0)]
    pub transient_share: f64,
    /// Poison share.
    #[arg(long, default_value_t = 0.0)]
    pub poison_share: f64,
    /// Out-of-stock share.
    #[arg(long, default_value_t = 0.0)]
    pub out_of_stock_share: f64,
    /// Cancel share.
    #[arg(long, default_value_t = 0.0)]
    pub cancel_share: f64,
    /// Retry ladder.
    #[arg(long, default_value = "250ms,1s,3s")]
    pub ladder: String,
}

/// `postroom demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Database: a SQLite file (recreated on each run and kept afterwards, so that
    /// `postroom parking list --database FILE` can look at it) or a postgres:// URL (the demo
    /// then uses its own tables: shop_* and postroom_demo_*).
    #[arg(long, env = "POSTROOM_DATABASE", default_value = "postroom-demo.db")]
    pub database: String,
    /// RabbitMQ URL (amqp://user:pass@host:5672/%2f). Without it the queue lives in the database.
    /// The management API is taken from POSTROOM_BROKER_API or the same host on port 15672.
    #[arg(long, env = "POSTROOM_BROKER")]
    pub broker: Option<String>,
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
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
}

/// `postroom demo-consumer` (internal).
#[derive(Debug, Args)]
pub struct DemoConsumerArgs {
    /// Database (file path or postgres:// URL).
    #[arg(long)]
    pub database: String,
    /// RabbitMQ URL.
    #[arg(long)]
    pub broker: Option<String>,
    /// Retry ladder.
    #[arg(long)]
    pub ladder: String,
    /// Order whose handling stops after COMMIT and before the ack, so it can be killed.
    #[arg(long)]
    pub crash_order: Option<String>,
}

/// `postroom parking …`.
#[derive(Debug, Subcommand)]
pub enum ParkingCommand {
    /// List parked messages matching a filter (payloads redacted unless --show-payload).
    List(ListArgs),
    /// Show every diagnostic of one parked message.
    Show(ShowArgs),
    /// Send selected parked messages back to the consumer that parked them, with the same
    /// id, at a bounded rate. Records each id so an interrupted run can be resumed.
    Redrive(RedriveArgs),
    /// List recorded redrive runs.
    Runs(RunsArgs),
    /// Move parked messages from RabbitMQ parking queues into the parking store (each acked
    /// only after its insert commits), so that list, show and redrive see them.
    Ingest(IngestArgs),
}

/// `postroom topology …`.
#[derive(Debug, Subcommand)]
pub enum TopologyCommand {
    /// Show what `apply` would create or change (nothing on an up-to-date broker).
    Plan(TopologyArgs),
    /// Create or change what `plan` shows. Refuses when a queue or exchange would have to be
    /// recreated (a conflict): those need an operator.
    Apply(TopologyApplyArgs),
}

/// Where the topology and the broker are.
#[derive(Debug, Args)]
pub struct BrokerArgs {
    /// Topology file (TOML: prefix, exchange, ladder, retry_style, delivery_limit, [[consumers]] name + bindings).
    #[arg(
        long = "topology",
        env = "POSTROOM_TOPOLOGY",
        default_value = "topology.toml",
        value_name = "FILE"
    )]
    pub topology: PathBuf,
    /// RabbitMQ URL (amqp://user:pass@host:5672/%2f).
    #[arg(
        long,
        env = "POSTROOM_BROKER",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub broker: String,
}

/// `topology plan`.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Machine-readable output: one JSON string per change.
    #[arg(long)]
    pub json: bool,
}

/// `topology apply`.
#[derive(Debug, Args)]
pub struct TopologyApplyArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Only show the plan.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `parking ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub store: StoreArgs,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Only this consumer's parking queue (default: every consumer of the topology).
    #[arg(long)]
    pub consumer: Option<String>,
    /// Stop after the queue stayed empty this long (e.g. 2s).
    #[arg(long, default_value = "2s")]
    pub idle: String,
}

/// Where the parking store is.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Database: SQLite file path (or sqlite://path) or postgres:// URL. Also POSTROOM_DATABASE or `database` in the config file.
    #[arg(long, env = "POSTROOM_DATABASE")]
    pub database: Option<String>,
    /// PostgreSQL table prefix of the postroom tables (default postroom_; the demo uses postroom_demo_).
    #[arg(long, env = "POSTROOM_TABLE_PREFIX")]
    pub table_prefix: Option<String>,
}

/// Which parked messages.
#[derive(Debug, Args, Default)]
pub struct FilterArgs {
    /// Only this message type (e.g. order.created).
    #[arg(long = "type", value_name = "TYPE")]
    pub message_type: Option<String>,
    /// Only this error class: transient, permanent or unknown.
    #[arg(long, value_name = "CLASS")]
    pub error_class: Option<String>,
    /// Only this error code (e.g. malformed, unknown_schema_version, dependency_down).
    #[arg(long, value_name = "CODE")]
    pub error_code: Option<String>,
    /// Only messages parked by this consumer.
    #[arg(long)]
    pub consumer: Option<String>,
    /// Parked at or after: RFC 3339 time, or an age such as 30m, 2h, 7d.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Parked before: RFC 3339 time, or an age such as 30m, 2h, 7d.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Only these message ids (repeat the flag for several).
    #[arg(long = "id", value_name = "ID")]
    pub ids: Vec<String>,
}

/// `parking list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub store: StoreArgs,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Also list messages already redriven.
    #[arg(long)]
    pub include_redriven: bool,
    /// At most this many rows.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Print message bodies (they may hold personal data).
    #[arg(long)]
    pub show_payload: bool,
    /// Machine-readable output: one JSON object per line.
    #[arg(long)]
    pub json: bool,
}

/// `parking show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub store: StoreArgs,
    /// Message id.
    pub id: String,
    /// Print the message body (it may hold personal data).
    #[arg(long)]
    pub show_payload: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `parking redrive`.
#[derive(Debug, Args)]
pub struct RedriveArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub store: StoreArgs,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub filter: FilterArgs,
    /// At most this many messages.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
    /// Messages per second (default 10, or `parking.redrive_rate` in the config file).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Show what would be redriven and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Continue an interrupted run instead of selecting anew.
    #[arg(long, value_name = "RUN_ID", conflicts_with = "dry_run")]
    pub resume: Option<String>,
    /// Send the messages back through RabbitMQ (amqp://…) instead of the database's embedded queue.
    #[arg(long, env = "POSTROOM_BROKER")]
    pub broker: Option<String>,
    /// Topology file naming the consumers' exchanges (with --broker).
    #[arg(
        long = "topology",
        env = "POSTROOM_TOPOLOGY",
        default_value = "topology.toml",
        value_name = "FILE"
    )]
    pub topology: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `parking runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub store: StoreArgs,
    /// At most this many runs.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}
