//! The command-line arguments of the harness (`postroom bench`).

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// The SQS scenario's default messages per round. The local endpoint (moto) spends time on
/// every message waiting in a queue at each `ReceiveMessage` — 0.47 ms per message here, so a
/// receive of ten from a 2,000-message backlog takes 0.94 s — and a 20,000-message round
/// measured that, for the raw loop and postroom alike, until it stalled. Real SQS has no such
/// cost: give `--messages` there.
pub const SQS_MESSAGES: usize = 500;

/// A group of measurements that can be selected with `--scenario`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Scenario {
    /// Outbox in PostgreSQL to a RabbitMQ quorum queue with confirms, beside a raw lapin loop.
    Relay,
    /// The relay scenario with messages built without an aggregate (each its own key,
    /// unordered), to set beside `relay`'s figure.
    RelayNoAggregate,
    /// RabbitMQ to handler to inbox + business update in PostgreSQL to ack, beside the same
    /// transaction run raw; and a batched mode beside the per-message mode.
    Consumer,
    /// End-to-end latency, outbox commit to handler start, at a fixed offered rate.
    Latency,
    /// Many retries walking the ladder: none early, p99 lateness within budget.
    Retry,
    /// Scheduled sends on the embedded outbox (SQLite): none published early, p99 lateness
    /// within 100 ms, with a relay whose idle wait is a minute.
    Scheduled,
    /// The handler's database down under load: consumer CPU and broker deliveries.
    HotLoop,
    /// Relay and consumer RSS with a large backlog, each in its own process.
    Memory,
    /// Relay and consumer on the embedded default (SQLite), beside raw SQLite.
    Embedded,
    /// The PostgreSQL store alone: the relay loop into a publisher that confirms at once,
    /// beside the raw claim-with-lease and mark statements; at 1 and 8 connections.
    PgRelay,
    /// The PostgreSQL store alone: the consumer loop on the queue in tables with an inbox
    /// handler, beside the same claim and transaction run raw; at 1 and 8 connections.
    PgConsumer,
    /// The PostgreSQL store alone: outbox rows written 100 per transaction beside one per
    /// transaction; at 1 and 8 connections.
    PgProduce,
    /// Outbox in PostgreSQL to a NATS JetStream stream (PubAck, Nats-Msg-Id), beside a raw
    /// async-nats publish-and-wait-PubAck loop.
    NatsRelay,
    /// NATS JetStream to handler to inbox + business update in PostgreSQL to a confirmed ack,
    /// beside a raw async-nats pull + the same transaction + ack.
    NatsConsumer,
    /// Amazon SQS (`POSTROOM_TEST_SQS`, region and credentials from the AWS environment): the
    /// relay beside a raw SendMessageBatch loop, and the consumer with its inbox beside raw
    /// receive + transaction + delete. 500 messages a round unless `--messages` is given (the
    /// local endpoint slows down with every message waiting in a queue).
    Sqs,
    /// Outbox in PostgreSQL to a Kafka topic (idempotent producer), beside a raw rdkafka
    /// producer loop on the same topic.
    KafkaRelay,
    /// Kafka to handler to inbox + business update in PostgreSQL to stored offset, beside a
    /// raw rdkafka consume + transaction + commit loop.
    KafkaConsumer,
    /// The whole path at once on RabbitMQ quorum queues: orders written to the PostgreSQL
    /// outbox, relayed, consumed with an inbox row + a counter update per message in one
    /// transaction, some failing once (retried by the broker after the first ladder stage) and
    /// some undecodable (parked on first delivery); postroom's per-message and batched
    /// consumers beside a raw lapin + sqlx service doing the same, in the same run.
    E2e,
    /// The WAL relay (PostgreSQL's write-ahead log read through a logical replication slot,
    /// on a cluster of the run's own with wal_level=logical) to RabbitMQ, Kafka, NATS and SQS,
    /// each beside its raw client loop; and the slot's decode rate with no broker.
    WalRelay,
}

impl Scenario {
    /// Every scenario, in run order.
    pub const ALL: [Scenario; 19] = [
        Scenario::Relay,
        Scenario::RelayNoAggregate,
        Scenario::Consumer,
        Scenario::Embedded,
        Scenario::Latency,
        Scenario::Retry,
        Scenario::Scheduled,
        Scenario::HotLoop,
        Scenario::Memory,
        Scenario::PgRelay,
        Scenario::PgConsumer,
        Scenario::PgProduce,
        Scenario::NatsRelay,
        Scenario::NatsConsumer,
        Scenario::Sqs,
        Scenario::KafkaRelay,
        Scenario::KafkaConsumer,
        Scenario::E2e,
        Scenario::WalRelay,
    ];
}

/// Arguments of `postroom bench`.
///
/// Every scenario runs beside its baseline in the same process run; the result is a ratio
/// against a target. Servers come from `POSTROOM_TEST_PG`, `POSTROOM_TEST_AMQP` and
/// `POSTROOM_TEST_RABBIT_API` (localhost defaults); every queue, exchange, policy and
/// database the harness creates has a random name and is deleted at the end.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Write the results as JSON to this file (one object per measurement).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,

    /// Run only this scenario (repeatable). Default: all of them.
    #[arg(long = "scenario", value_enum, value_name = "NAME")]
    pub scenarios: Vec<Scenario>,

    /// Small sizes everywhere (a smoke run that proves the harness works, in seconds).
    #[arg(long)]
    pub quick: bool,

    /// Messages per throughput run (relay, consumer, embedded, e2e). Default 20000, quick 300;
    /// the SQS scenario's default is 500 (see `sqs`).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub messages: Option<usize>,

    /// Target size of each message body in bytes (the envelope JSON is padded to it).
    #[arg(long, default_value_t = 512, value_name = "BYTES", value_parser = parse_payload_bytes)]
    pub payload_bytes: usize,

    /// Handlers running at once in the consumer scenarios (both postroom and raw), and the
    /// PostgreSQL pool size.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,

    /// RabbitMQ prefetch (unacked deliveries in flight) of every consumer. Must cover
    /// `--batch` for the batched consumer, which uses at least twice the batch.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub prefetch: u16,

    /// Rows per relay claim, messages per raw publish window, and messages per transaction
    /// in the batched consumer.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=10000))]
    pub batch: u16,

    /// Relays running at once in the relay scenarios (postroom); the raw loop uses as many
    /// publisher channels.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub relays: u16,

    /// Claim/publish/mark pipelines of each relay in the relay scenarios (postroom's relay
    /// option `lanes`, each on its own database connection); the raw loop has no database.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub relay_lanes: u16,

    /// In the relay scenarios to a broker and in `e2e`, postroom's outbox deletes each row
    /// once its publish is confirmed instead of marking it published
    /// (`PgOutbox::delete_on_publish`, `postroom relay --retention 0s`: cheaper marks, no
    /// record of what was published).
    #[arg(long)]
    pub relay_delete_published: bool,

    /// Channels each of postroom's RabbitMQ publishers confirms on at once
    /// (`BrokerOptions::publisher_channels`; 1, the default: callers take turns, each group
    /// waiting for the previous group's confirms).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub publisher_channels: u16,

    /// Runs of each throughput pair, alternating postroom and raw; the median of each counts.
    /// Default 3 (`pg-relay`: 5, after an uncounted warm-up pair), quick 1.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=50))]
    pub rounds: Option<u16>,

    /// Aggregates the messages of the PostgreSQL store scenarios are spread over, round robin
    /// (fewer aggregates: more of the relays' claims wait behind heads another relay holds).
    #[arg(long, env = "PG_BENCH_AGGREGATES", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub aggregates: u64,

    /// Offered rate of the latency scenario, messages per second (keep it below saturation).
    #[arg(long, default_value_t = 200.0, value_name = "MSG_PER_SEC", value_parser = postroom_ops::limits::parse_rate)]
    pub latency_rate: f64,

    /// Duration of the latency scenario in seconds. Default 20, quick 2.
    #[arg(long, value_name = "SECS", value_parser = postroom_ops::limits::parse_positive_seconds)]
    pub latency_secs: Option<f64>,

    /// Retries to schedule in the retry scenario (spread over messages walking the whole
    /// ladder). Default 100000, quick 300.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub retries: Option<usize>,

    /// The retry ladder of the retry scenario. Default `1s,2s,4s`; quick `1s,2s`.
    #[arg(long, value_name = "LADDER")]
    pub retry_ladder: Option<String>,

    /// Offered rate of first deliveries in the retry scenario, messages per second. Each
    /// message then makes one retry per stage, so the consumer handles rate x (stages + 1)
    /// deliveries and rate x stages confirmed retry publishes a second; 150/s with three
    /// stages saturated a loaded 2-core machine (lateness then measures the backlog).
    #[arg(long, default_value_t = 60.0, value_name = "MSG_PER_SEC", value_parser = postroom_ops::limits::parse_rate)]
    pub retry_rate: f64,

    /// How long the handler's database stays down in the hot-loop scenario, in seconds.
    /// Default 60, quick 4.
    #[arg(long, value_name = "SECS", value_parser = postroom_ops::limits::parse_positive_seconds)]
    pub outage_secs: Option<f64>,

    /// Messages waiting while the database is down (hot-loop scenario). Default 5000, quick 200.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub outage_messages: Option<usize>,

    /// e2e: the share of messages whose first delivery fails transiently (each is retried
    /// once, after the first ladder stage, by the broker).
    #[arg(long, default_value_t = 0.10, value_name = "FRACTION", value_parser = parse_share)]
    pub e2e_fail_share: f64,

    /// e2e: the share of messages with an undecodable body (parked on their first delivery).
    #[arg(long, default_value_t = 0.01, value_name = "FRACTION", value_parser = parse_share)]
    pub e2e_poison_share: f64,

    /// e2e: the broker's delay before a failed message comes back (the retry ladder's one
    /// stage; the raw service's TTL retry queue).
    #[arg(long, default_value = "1s", value_name = "DELAY")]
    pub e2e_retry_delay: String,

    /// e2e: prefetch of the raw service and of postroom's per-message consumer (both run
    /// `--concurrency` handlers). The batched consumer takes what its batches need:
    /// `--e2e-lanes` x `--batch` x 2.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub e2e_prefetch: u16,

    /// e2e: batches the batched consumer applies at once (its lanes); each holds up to
    /// `--batch` messages.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub e2e_lanes: u16,

    /// Backlog of the memory scenario. Default 1000000, quick 5000.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub backlog: Option<usize>,

    /// How long relay and consumer each run over the backlog in the memory scenario, in
    /// seconds (they stop earlier when it is drained). Default 60, quick 3.
    #[arg(long, value_name = "SECS", value_parser = postroom_ops::limits::parse_positive_seconds)]
    pub memory_secs: Option<f64>,
}

/// The most messages a run may ask for.
pub const MAX_COUNT: usize = 100_000_000;

/// A count of messages from 1 to [`MAX_COUNT`].
pub fn parse_count(s: &str) -> Result<usize, String> {
    postroom_ops::limits::parse_count(s, 1, MAX_COUNT)
}

/// A share of the messages, from 0 to 0.5.
pub fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=0.5).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is not a share from 0 to 0.5")),
        Err(e) => Err(format!("{s:?} is not a number: {e}")),
    }
}

/// A message body size from 64 bytes to 16 MiB.
pub fn parse_payload_bytes(s: &str) -> Result<usize, String> {
    postroom_ops::limits::parse_count(s, 64, 16 << 20)
}

/// Write the getters of the sizes that a run may give and that otherwise default to one value,
/// or to a smaller one with `--quick`. An entry `name: Type = full, quick small;` is a
/// `pub fn name(&self) -> Type`: the option `name` when given, else `full`, or `small` on a
/// quick run; `name from field: …` reads the option `field` instead. An entry's doc comment
/// goes on its getter.
macro_rules! sized_by_quick {
    ($($(#[$doc:meta])* $name:ident $(from $field:ident)?: $t:ty = $full:expr, quick $quick:expr;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(&self) -> $t {
                self.pick(sized_by_quick!(@given self $name $($field)?).clone(), $full, $quick)
            }
        )*
    };
    (@given $s:ident $name:ident) => { $s.$name };
    (@given $s:ident $name:ident $field:ident) => { $s.$field };
}

impl BenchArgs {
    /// The scenarios to run, in run order.
    #[must_use]
    pub fn selected(&self) -> Vec<Scenario> {
        if self.scenarios.is_empty() {
            return Scenario::ALL.to_vec();
        }
        Scenario::ALL
            .into_iter()
            .filter(|s| self.scenarios.contains(s))
            .collect()
    }

    fn pick<T>(&self, given: Option<T>, full: T, quick: T) -> T {
        given.unwrap_or(if self.quick { quick } else { full })
    }

    sized_by_quick! {
        /// Messages per throughput run.
        messages: usize = 20_000, quick 300;
        /// Messages per round of the SQS scenario: `--messages` when given, else
        /// [`SQS_MESSAGES`] (quick 300).
        sqs_messages from messages: usize = SQS_MESSAGES, quick 300;
        /// Seconds of the latency run.
        latency_secs: f64 = 20.0, quick 2.0;
        /// Retries to schedule.
        retries: usize = 100_000, quick 300;
        /// The retry ladder text.
        retry_ladder: String = "1s,2s,4s".into(), quick "1s,2s".into();
        /// Seconds of database outage.
        outage_secs: f64 = 60.0, quick 4.0;
        /// Messages waiting during the outage.
        outage_messages: usize = 5_000, quick 200;
        /// Backlog of the memory scenario.
        backlog: usize = 1_000_000, quick 5_000;
        /// Seconds each memory run lasts at most.
        memory_secs: f64 = 60.0, quick 3.0;
    }

    /// Rounds of each throughput pair.
    #[must_use]
    pub fn rounds(&self) -> usize {
        self.rounds_or(3)
    }

    /// Rounds of the PostgreSQL relay pair (single rounds on a shared 2-core machine vary by
    /// ±20 %, so it runs more by default).
    #[must_use]
    pub fn pg_relay_rounds(&self) -> usize {
        self.rounds_or(5)
    }

    fn rounds_or(&self, full: u16) -> usize {
        usize::from(self.pick(self.rounds, full, 1))
    }

    /// Aggregates of the PostgreSQL store scenarios.
    #[must_use]
    pub fn aggregates(&self) -> usize {
        usize::try_from(self.aggregates).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> BenchArgs {
        Cli::parse_from(std::iter::once("bench").chain(args.iter().copied())).bench
    }

    /// A default SQS run must be one the local endpoint can serve: 20,000 messages stalled it
    /// (every receive costs it time in proportion to the messages waiting).
    #[test]
    fn an_sqs_run_defaults_to_a_backlog_the_local_endpoint_can_serve() {
        let full = parse(&[]);
        assert_eq!(full.messages(), 20_000);
        assert_eq!(full.sqs_messages(), 500);
        assert_eq!(parse(&["--quick"]).sqs_messages(), 300);
        assert_eq!(parse(&["--messages", "2000"]).sqs_messages(), 2000);
    }
}
