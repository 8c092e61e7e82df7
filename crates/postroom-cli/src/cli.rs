//! Command-line definitions (clap derive). URLs are [`UrlText`]: parsed by `postroom_ops`
//! (whose errors never echo a password), printed only redacted; the values of their
//! environment variables are never shown in `--help`.

use clap::{Args, Parser, Subcommand};
use postroom_ops::UrlText;
use postroom_ops::args::PasswordArgs;
use postroom_ops::limits::{parse_limit, parse_rate};
use std::path::PathBuf;

/// A span for clap: `14d`, `12h`, `90m`.
fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    postroom_ops::time::parse_span(s).map_err(|e| e.message().to_string())
}

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
    #[allow(missing_docs)]
    #[command(flatten)]
    pub passwords: PasswordArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the orders → inventory example end to end on the embedded store, with the source
    /// article's faults injected, and check that nothing is lost or applied twice.
    #[cfg(feature = "demo")]
    Demo(postroom_demo::args::DemoArgs),
    /// Inspect and redrive parked (dead-lettered) messages.
    #[command(subcommand)]
    Parking(ParkingCommand),
    /// Measure relay, consumer, latency, retry timing, hot-loop and memory figures beside raw
    /// baselines run in the same process, and print the ratios against their targets.
    #[cfg(feature = "bench")]
    Bench(postroom_bench::BenchArgs),
    /// Plan and apply a broker's topology (RabbitMQ: exchanges, quorum queues, retry stages,
    /// parking, and the policies that set TTL, dead-lettering, overflow and delivery limits;
    /// NATS: streams and durable consumers; Kafka: topics; SQS: queues and their DLQs).
    #[command(subcommand)]
    Topology(TopologyCommand),
    /// The web console: the parking lot grouped by cause, redrive from the browser, the
    /// pipeline, audit; /metrics, /healthz, /readyz. Runs until SIGTERM.
    #[cfg(feature = "console")]
    Serve(crate::serve::ServeArgs),
    /// The web console's users file: `postroom console hash-password` reads a password from
    /// stdin and prints the argon2 hash a users line takes.
    #[cfg(feature = "console")]
    #[command(subcommand)]
    Console(crate::console::ConsoleCommand),
    /// A long-running outbox relay for services in any language (rows inserted into the
    /// outbox table in their own transactions), with /metrics and health. Several may run at
    /// once; SIGTERM drains the batch in hand.
    #[cfg(feature = "console")]
    Relay(crate::relay::RelayArgs),
    /// The continuous parking ingest: a broker's parked copies into the parking store, with
    /// /metrics and health, until SIGTERM.
    #[cfg(feature = "console")]
    Ingest(crate::ingest::IngestDaemonArgs),
    /// One consumer's deliveries from a broker into its inbox queue (PostgreSQL), each acked
    /// only after its insert commits, with /metrics and health, until SIGTERM. Feeds on two
    /// brokers may fill one inbox queue at once (moving between brokers).
    #[cfg(feature = "console")]
    Feed(crate::feed::FeedArgs),
    /// Run producer, relay and consumer processes while killing them with SIGKILL at random,
    /// then check from the databases that nothing was lost or applied twice.
    #[cfg(feature = "demo")]
    Soak(postroom_demo::args::SoakArgs),
    /// The demo's inventory consumer process (started and killed by `demo`).
    #[cfg(feature = "demo")]
    #[command(hide = true, name = postroom_demo::demo::consumer::COMMAND)]
    DemoConsumer(postroom_demo::args::DemoConsumerArgs),
    /// A soak process: producer, relay or consumer (started and killed by `soak`).
    #[cfg(feature = "demo")]
    #[command(hide = true, name = postroom_demo::soak::worker::COMMAND)]
    SoakWorker(postroom_demo::args::SoakWorkerArgs),
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
    /// Move parked messages from a broker's parking queues into the parking store (each acked
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
    /// Topology file (TOML: prefix, ladder, [[consumers]] name + bindings, and the broker's own
    /// keys, e.g. RabbitMQ's exchange, retry_style and delivery_limit).
    #[arg(
        long = "topology",
        env = "POSTROOM_TOPOLOGY",
        default_value = "topology.toml",
        value_name = "FILE"
    )]
    pub topology: PathBuf,
    /// Broker URL (the forms this build opens are listed in `--help`).
    #[arg(
        help = format!(
            "Broker URL: {}. An amqp:// URL without a user logs in as guest. Put the password in \
             POSTROOM_BROKER_PASSWORD or --broker-password-file rather than here",
            postroom::registry::broker_forms()),
        long,
        env = "POSTROOM_BROKER",
        hide_env_values = true,
        default_value = "amqp://127.0.0.1:5672/%2f"
    )]
    pub broker: UrlText,
}

/// `topology plan`.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Machine-readable output: one JSON object per change.
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
    /// Stop after the queue stayed empty this long (e.g. 2s; at most 1h).
    #[arg(long, default_value = "2s")]
    pub idle: String,
}

/// Where the parking store is.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Database (the forms this build opens are listed in `--help`).
    #[arg(long, env = "POSTROOM_DATABASE", hide_env_values = true, help = format!(
        "Database: {}. Also POSTROOM_DATABASE or `database` in the config file. Put a password in \
         POSTROOM_DATABASE_PASSWORD or --database-password-file rather than here",
        postroom::registry::database_forms()))]
    pub database: Option<UrlText>,
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

/// Whether to print payloads.
#[derive(Debug, Args)]
pub struct PayloadArgs {
    /// Print message bodies (they may hold personal data).
    #[arg(long)]
    pub show_payload: bool,
    /// With --show-payload: print at most this many bytes of each body.
    #[arg(long, default_value_t = postroom_ops::parking::output::DEFAULT_PAYLOAD_LIMIT, value_name = "BYTES", value_parser = parse_limit)]
    pub payload_limit: usize,
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
    #[arg(long, default_value_t = 100, value_parser = parse_limit)]
    pub limit: usize,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub payload: PayloadArgs,
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
    #[allow(missing_docs)]
    #[command(flatten)]
    pub payload: PayloadArgs,
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
    #[arg(long, default_value_t = 1000, value_parser = parse_limit)]
    pub limit: usize,
    /// Messages per second, 0.001 to 100000 (default 10, or `parking.redrive_rate` in the
    /// config file).
    #[arg(long, value_parser = parse_rate)]
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
    /// How long the consumers' inboxes keep a message id (their purge age; e.g. `14d`). A
    /// message parked longer ago than this is not sent back unless `--force`: its inbox row
    /// may be gone, and a repeat could not be recognised.
    #[arg(long, value_name = "AGE", default_value = "14d", value_parser = parse_age)]
    pub replay_window: std::time::Duration,
    /// Send back messages older than the replay window too, after checking by hand that their
    /// effect was not applied. Messages the inbox shows as applied are skipped all the same.
    #[arg(long)]
    pub force: bool,
    /// Send the messages back through a broker instead of the database's own queue.
    #[arg(long, env = "POSTROOM_BROKER", hide_env_values = true, help = format!(
        "Send the messages back through a broker instead of the database's own queue: {}",
        postroom::registry::broker_forms()))]
    pub broker: Option<UrlText>,
    /// Topology file: where each consumer's messages go back (TOML: prefix, ladder,
    /// [[consumers]] name + bindings, and the broker's own keys). Read with --broker.
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
    #[arg(long, default_value_t = 20, value_parser = parse_limit)]
    pub limit: usize,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}
