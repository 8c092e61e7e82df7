//! The embedded queue: a durable table of per-consumer message copies with leases.
//!
//! Publishing commits the copies (the commit is the confirmation). A retry is one UPDATE that
//! moves the message's visibility into the future: the delay lives in the table, nothing
//! sleeps in the consumer. An expired lease makes the message deliverable again, which is how
//! a consumer killed between its commit and its ack gets it back (the inbox absorbs it); each
//! delivery is counted, so a message that kills its consumer every time reaches the
//! crash-loop bound and is parked.

mod backlog;
mod delivery;
mod subscriber;

pub use delivery::SqliteDelivery;
pub use subscriber::SqliteSubscriber;

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::now_ms;
use postroom_core::message::headers as h;
use postroom_core::{
    Backlog, BacklogProbe, BoxSubscriber, Capabilities, Error, ErrorKind, OutgoingMessage,
    Publisher, QueueConfig, Result, Route, Subscription, Transport, async_trait,
};
use std::sync::Arc;
use std::time::Duration;

/// The embedded queue transport: a confirming publisher (the insert's commit is the confirm)
/// and subscribers of named consumers.
#[derive(Clone, Debug)]
pub struct SqliteQueue {
    store: SqliteStore,
    config: QueueConfig,
}

impl SqliteQueue {
    pub(crate) fn new(store: SqliteStore, config: QueueConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { store, config })
    }

    /// The embedded queue's defaults: a lease of a minute, eight rows per fetch (a fetch is
    /// a write transaction on the one database file: fewer, larger ones), a poll every 20 ms
    /// while the queue is empty.
    pub const fn defaults() -> QueueConfig {
        QueueConfig::new(Duration::from_secs(60), 8, Duration::from_millis(20))
    }

    /// The settings.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Bind `consumer` to topic `patterns` and return its subscriber (prefetch from the
    /// queue's settings).
    pub async fn subscribe(&self, consumer: &str, patterns: &[&str]) -> Result<SqliteSubscriber> {
        self.bind(consumer, patterns).await?;
        Ok(SqliteSubscriber::new(
            self.store.clone(),
            consumer.to_string(),
            self.config.clone(),
        ))
    }

    /// Bind `consumer` to topic `patterns` without subscribing (so publishes are kept for it).
    pub async fn bind(&self, consumer: &str, patterns: &[&str]) -> Result<()> {
        let mut tx = self.store.begin().await?;
        for p in patterns {
            sqlx::query(
                "INSERT OR IGNORE INTO postroom_subscriptions (consumer, pattern) VALUES (?, ?)",
            )
            .bind(consumer)
            .bind(*p)
            .execute(&mut *tx)
            .await
            .db()?;
        }
        tx.commit().await.db()
    }

    async fn insert_all(&self, messages: &[&OutgoingMessage]) -> Result<Vec<Result<()>>> {
        let _turn = self.store.write_turn().await;
        let mut tx = self.store.begin().await?;
        let subs: Vec<(String, String)> =
            sqlx::query_as("SELECT consumer, pattern FROM postroom_subscriptions")
                .fetch_all(&mut *tx)
                .await
                .db()?;
        let now = now_ms();
        let mut results = Vec::with_capacity(messages.len());
        for m in messages {
            let mut targets: Vec<&str> = match &m.route {
                Route::Topic(key) => subs
                    .iter()
                    .filter(|(_, p)| postroom_core::pattern::matches(p, key))
                    .map(|(c, _)| c.as_str())
                    .collect(),
                Route::Consumer(c) => subs
                    .iter()
                    .filter(|(s, _)| s == c)
                    .map(|(s, _)| s.as_str())
                    .take(1)
                    .collect(),
            };
            targets.sort_unstable();
            targets.dedup();
            if targets.is_empty() {
                metrics::counter!(postroom_core::metrics::UNROUTABLE, "transport" => "sqlite")
                    .increment(1);
                results.push(Err(Error::new(
                    ErrorKind::Unroutable,
                    format!("no consumer is bound for {:?}", m.route),
                )));
                continue;
            }
            let headers = serde_json::to_string(&m.headers).expect("headers serialise");
            for consumer in targets {
                sqlx::query(
                    "INSERT INTO postroom_queue (consumer, message_id, routing_key, headers, body, enqueued_at, visible_at)
                     VALUES (?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(consumer)
                .bind(m.id.to_string())
                .bind(m.headers.get(h::ORIGINAL_ROUTE).map_or(m.route.as_str(), String::as_str))
                .bind(&headers)
                .bind(&m.body)
                .bind(now)
                .bind(now)
                .execute(&mut *tx)
                .await
                .db()?;
            }
            results.push(Ok(()));
        }
        tx.commit().await.db()?;
        Ok(results)
    }
}

#[async_trait]
impl Publisher for SqliteQueue {
    async fn publish(&self, message: &OutgoingMessage) -> Result<()> {
        self.insert_all(&[message])
            .await?
            .pop()
            .expect("one result")
    }

    /// One transaction for the batch: its commit confirms every message in it.
    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        let refs: Vec<&OutgoingMessage> = messages.iter().collect();
        match self.insert_all(&refs).await {
            Ok(r) => r,
            Err(e) => messages
                .iter()
                .map(|_| Err(Error::new(e.kind(), e.to_string())))
                .collect(),
        }
    }
}

#[async_trait]
impl Transport for SqliteQueue {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        // SQLite's default limit on a blob.
        self.config.capabilities(1_000_000_000)
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        Arc::new(self.clone())
    }

    async fn bind(&self, subscription: &Subscription) -> Result<()> {
        SqliteQueue::bind(self, &subscription.consumer, &subscription.route_refs()).await
    }

    async fn subscribe(&self, subscription: &Subscription) -> Result<BoxSubscriber> {
        postroom_core::transport::table_queue::subscribe(
            &self.config,
            subscription,
            async |config, consumer, routes| {
                let queue = SqliteQueue {
                    store: self.store.clone(),
                    config,
                };
                queue.subscribe(consumer, routes).await
            },
        )
        .await
    }

    async fn dead_letters(&self, _consumer: &str) -> Result<Option<BoxSubscriber>> {
        postroom_core::transport::table_queue::dead_letters()
    }

    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        self.store.backlog(consumer).await
    }
}
