//! Isolated resources on the shared servers: a fresh PostgreSQL database and random RabbitMQ
//! workloads, each deleted at the end (or on drop, if a scenario fails half-way).

pub mod kafka;
pub mod nats;
pub mod pg;
pub mod rabbit;
pub mod sqs;

use crate::{BenchError, Ctx};
use postroom_core::{Subscription, Transport, async_trait};

/// One scenario's isolated names on a broker, with postroom's transport on them.
#[async_trait]
pub trait BrokerWorkload: Sized + Send + Sync {
    /// Create the names of `scenario` (under a random prefix) on the run's server.
    async fn create(ctx: &Ctx, scenario: &str) -> Result<Self, BenchError>;

    /// postroom's transport on the workload.
    fn transport(&self) -> &dyn Transport;

    /// Close the links and delete every name the workload made.
    async fn delete(self) -> Result<(), BenchError>;

    /// Messages per round of the broker's relay and consumer scenarios.
    fn messages(args: &crate::BenchArgs) -> usize {
        args.messages()
    }
}

/// Where the servers are, from the environment with localhost defaults, and how postroom's
/// links to them are set up.
#[derive(Clone)]
pub struct Endpoints {
    /// Admin URL of PostgreSQL (`POSTROOM_TEST_PG`).
    pub pg: String,
    /// AMQP URL of RabbitMQ (`POSTROOM_TEST_AMQP`).
    pub amqp: String,
    /// Management API of RabbitMQ (`POSTROOM_TEST_RABBIT_API`).
    pub rabbit_api: String,
    /// NATS with JetStream (`POSTROOM_TEST_NATS`).
    pub nats: String,
    /// Kafka bootstrap brokers, `host:port` (`POSTROOM_TEST_KAFKA`).
    pub kafka: String,
    /// Channels each of postroom's RabbitMQ publishers confirms on at once
    /// (`BrokerOptions::publisher_channels`; the bench's `--publisher-channels`).
    pub publisher_channels: usize,
}

/// Hand-written: the URLs may hold passwords.
impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("pg", &postroom_ops::redact(&self.pg))
            .field("amqp", &postroom_ops::redact(&self.amqp))
            .field("rabbit_api", &postroom_ops::redact(&self.rabbit_api))
            .field("nats", &postroom_ops::redact(&self.nats))
            .field("kafka", &self.kafka)
            .field("publisher_channels", &self.publisher_channels)
            .finish()
    }
}

impl Endpoints {
    /// Read the endpoints from the environment.
    #[must_use]
    pub fn from_env() -> Self {
        let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        Self {
            pg: var(
                "POSTROOM_TEST_PG",
                "postgres://postgres@127.0.0.1:5432/postgres",
            ),
            amqp: var(
                "POSTROOM_TEST_AMQP",
                "amqp://guest:guest@127.0.0.1:5672/%2f",
            ),
            rabbit_api: var(
                "POSTROOM_TEST_RABBIT_API",
                "http://guest:guest@127.0.0.1:15672",
            ),
            nats: var("POSTROOM_TEST_NATS", "nats://127.0.0.1:4222"),
            kafka: var("POSTROOM_TEST_KAFKA", "127.0.0.1:9092"),
            publisher_channels: postroom_rabbitmq::BrokerOptions::default().publisher_channels,
        }
    }
}

/// The bench consumer's subscription: [`CONSUMER`](rabbit::CONSUMER) bound to `binding`,
/// `prefetch` deliveries in flight.
#[must_use]
pub fn bench_subscription(binding: &str, prefetch: u16) -> Subscription {
    Subscription::new(rabbit::CONSUMER, &[binding]).prefetch(usize::from(prefetch))
}

/// A short random suffix for names.
#[must_use]
pub fn rand_suffix() -> String {
    uuid::Uuid::now_v7().simple().to_string()[20..].to_string()
}

/// Implement `Debug` for a workload type with a `prefix` field: its type name and the random
/// prefix of every name it made (its clients and links print nothing worth reading).
macro_rules! debug_by_prefix {
    ($workload:ident) => {
        impl std::fmt::Debug for $workload {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($workload))
                    .field("prefix", &self.prefix)
                    .finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use debug_by_prefix;
