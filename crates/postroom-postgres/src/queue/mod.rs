//! `PgQueue`: a queue transport in PostgreSQL tables, so that the whole of postroom (and its
//! conformance suite) runs on PostgreSQL alone.
//!
//! Consumers subscribe with AMQP topic patterns (`*` one word, `#` any number). A publish to a
//! topic inserts one row per matching consumer in one statement and fails with
//! [`ErrorKind::Unroutable`] when none matches; a publish to [`Route::Consumer`] reaches that
//! consumer only. Subscribers claim visible rows with `FOR UPDATE SKIP LOCKED` and a lease
//! token; an ack deletes the row, a retry makes it visible again after the delay (the delay
//! lives in the table, not in a sleep), a park moves it to the parking lot, each in one
//! transaction and each checking the lease token.

mod backlog;
mod delivery;

mod subscriber;

pub use delivery::PgDelivery;
pub use subscriber::PgSubscriber;

use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use async_trait::async_trait;
use postroom_core::message::headers as h;
use postroom_core::{
    Backlog, BacklogProbe, BoxSubscriber, Capabilities, Error, ErrorKind, OutgoingMessage,
    Publisher, QueueConfig, Result, Route, Subscription, Transport,
};
use sqlx::PgPool;
use sqlx::types::Json;
use std::sync::Arc;
use std::time::Duration;

/// The queue transport: a confirming [`Publisher`] (the insert's commit is the confirm) and
/// a factory of [`PgSubscriber`]s.
#[derive(Clone, Debug)]
pub struct PgQueue {
    pool: PgPool,
    prefix: TablePrefix,
    config: QueueConfig,
}

impl PgQueue {
    /// A queue in `pool` under `prefix` (migrated beforehand).
    pub fn new(pool: PgPool, prefix: TablePrefix, config: QueueConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            pool,
            prefix,
            config,
        })
    }

    /// The PostgreSQL queue's defaults: a lease of a minute, one row per claim (subscribers
    /// of one consumer share the rows fairly), a poll every 50 ms while the queue is empty.
    pub const fn defaults() -> QueueConfig {
        QueueConfig::new(Duration::from_secs(60), 1, Duration::from_millis(50))
    }

    /// The settings.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Bind `consumer` to every topic pattern in `topics` (bindings are durable and additive,
    /// like AMQP queue bindings).
    pub async fn bind(&self, consumer: &str, topics: &[&str]) -> Result<()> {
        let sql = format!(
            "INSERT INTO {p}subscriptions (consumer, pattern, regex) SELECT $1, t, r FROM unnest($2::text[], $3::text[]) AS u(t, r)
             ON CONFLICT (consumer, pattern) DO NOTHING",
            p = self.prefix
        );
        let regexes: Vec<String> = topics
            .iter()
            .map(|t| postroom_core::pattern::to_regex(t))
            .collect();
        sqlx::query(&sql)
            .bind(consumer)
            .bind(topics)
            .bind(regexes)
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(())
    }

    /// Bind `consumer` to `topics` and return a subscriber for it.
    pub async fn subscribe(&self, consumer: &str, topics: &[&str]) -> Result<PgSubscriber> {
        self.bind(consumer, topics).await?;
        Ok(PgSubscriber::new(
            self.pool.clone(),
            self.prefix.clone(),
            consumer.to_string(),
            self.config.clone(),
        ))
    }

    async fn insert(&self, m: &OutgoingMessage) -> Result<u64> {
        let p = &self.prefix;
        // $6 is the consumer for a direct route; a topic route leaves it NULL.
        let (sql, routing_key, consumer) = match &m.route {
            Route::Topic(topic) => (
                format!(
                    "WITH i AS (INSERT INTO {p}queue (consumer, message_id, routing_key, headers, body, attempt)
                        SELECT DISTINCT s.consumer, $1::uuid, $2::text, $3::jsonb, $4::bytea, $5::int
                        FROM {p}subscriptions s WHERE $2 ~ s.regex AND $6::text IS NULL RETURNING 1)
                     SELECT count(*) FROM i"
                ),
                topic.as_str(),
                None,
            ),
            Route::Consumer(consumer) => (
                format!(
                    "WITH i AS (INSERT INTO {p}queue (consumer, message_id, routing_key, headers, body, attempt)
                        SELECT $6, $1, $2, $3, $4, $5
                        WHERE EXISTS (SELECT 1 FROM {p}subscriptions WHERE consumer = $6) RETURNING 1)
                     SELECT count(*) FROM i"
                ),
                m.headers.get(h::ORIGINAL_ROUTE).map_or(consumer.as_str(), String::as_str),
                Some(consumer.as_str()),
            ),
        };
        let q = sqlx::query(&sql)
            .bind(m.id.as_uuid())
            .bind(routing_key)
            .bind(Json(&m.headers))
            .bind(&m.body)
            .bind(i32::try_from(m.attempt()).unwrap_or(i32::MAX))
            .bind(consumer);
        crate::fetch_count(&self.pool, q).await
    }
}

#[async_trait]
impl Publisher for PgQueue {
    async fn publish(&self, message: &OutgoingMessage) -> Result<()> {
        match self.insert(message).await? {
            0 => Err(Error::new(
                ErrorKind::Unroutable,
                format!("no consumer is bound for {:?}", message.route),
            )),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Transport for PgQueue {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        // PostgreSQL's limit on one bytea value.
        self.config.capabilities(1 << 30)
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        Arc::new(self.clone())
    }

    async fn bind(&self, subscription: &Subscription) -> Result<()> {
        PgQueue::bind(self, &subscription.consumer, &subscription.route_refs()).await
    }

    async fn subscribe(&self, subscription: &Subscription) -> Result<BoxSubscriber> {
        postroom_core::transport::table_queue::subscribe(
            &self.config,
            subscription,
            async |config, consumer, routes| {
                PgQueue::new(self.pool.clone(), self.prefix.clone(), config)?
                    .subscribe(consumer, routes)
                    .await
            },
        )
        .await
    }

    async fn dead_letters(&self, _consumer: &str) -> Result<Option<BoxSubscriber>> {
        postroom_core::transport::table_queue::dead_letters()
    }

    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        BacklogProbe::backlog(self, consumer).await
    }
}
