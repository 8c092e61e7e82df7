//! Isolated resources on the shared servers: a fresh PostgreSQL database and random RabbitMQ
//! workloads, each deleted at the end (or on drop, if a scenario fails half-way).

pub mod pg;
pub mod rabbit;

/// Where the servers are, from the environment with localhost defaults.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// Admin URL of PostgreSQL (`POSTROOM_TEST_PG`).
    pub pg: String,
    /// AMQP URL of RabbitMQ (`POSTROOM_TEST_AMQP`).
    pub amqp: String,
    /// Management API of RabbitMQ (`POSTROOM_TEST_RABBIT_API`).
    pub rabbit_api: String,
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
        }
    }
}

/// A short random suffix for names.
#[must_use]
pub fn rand_suffix() -> String {
    uuid::Uuid::now_v7().simple().to_string()[20..].to_string()
}
