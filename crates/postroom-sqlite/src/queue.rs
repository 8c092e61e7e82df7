//! The embedded queue: a durable table of per-consumer message copies with leases.
//!
//! Publishing commits the copies (the commit is the confirmation). A retry is one UPDATE that
//! moves the message's visibility into the future: the delay lives in the table, nothing
//! sleeps in the consumer. An expired lease makes the message deliverable again, which is how
//! a consumer killed between its commit and its ack gets it back (the inbox absorbs it).

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{from_ms, ms, now_ms};
use postroom_core::transport::Handback;
use postroom_core::{
    Backlog, BacklogProbe, Delivery, Error, ErrorKind, OutgoingMessage, ParkedMessage, Publisher,
    ReceivedMessage, Result, RetryPlan, Route, Subscriber, async_trait,
};
use sqlx::Row;
use std::collections::VecDeque;
use std::time::Duration;

/// Publisher and subscriber factory for the embedded queue.
#[derive(Clone, Debug)]
pub struct SqliteQueue {
    store: SqliteStore,
    defaults: SubscribeOptions,
}

/// Subscription settings.
#[derive(Clone, Debug)]
pub struct SubscribeOptions {
    /// Messages leased per fetch (≥ 1; 0 is refused).
    pub prefetch: usize,
    /// How long a delivery stays leased before it is delivered again.
    pub lease: Duration,
    /// How often an idle subscriber looks for new messages.
    pub poll_interval: Duration,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        Self {
            prefetch: 8,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_millis(20),
        }
    }
}

impl SqliteQueue {
    pub(crate) fn new(store: SqliteStore) -> Self {
        Self {
            store,
            defaults: SubscribeOptions::default(),
        }
    }

    /// The same queue with `options` as the defaults of [`subscribe_default`](Self::subscribe_default).
    #[must_use]
    pub fn with_options(mut self, options: SubscribeOptions) -> Self {
        self.defaults = options;
        self
    }

    /// Subscribe with this queue's default options.
    pub async fn subscribe_default(
        &self,
        consumer: &str,
        patterns: &[&str],
    ) -> Result<SqliteSubscriber> {
        self.subscribe(consumer, patterns, self.defaults.clone())
            .await
    }

    /// Bind `consumer` to topic `patterns` (AMQP `*` / `#`) and return its subscriber.
    pub async fn subscribe(
        &self,
        consumer: &str,
        patterns: &[&str],
        options: SubscribeOptions,
    ) -> Result<SqliteSubscriber> {
        if options.prefetch == 0 {
            return Err(Error::new(
                ErrorKind::Config,
                "prefetch must be at least 1 (0 would mean unbounded)",
            ));
        }
        if options.lease.is_zero() {
            return Err(Error::new(
                ErrorKind::Config,
                "lease must be longer than zero",
            ));
        }
        self.bind(consumer, patterns).await?;
        Ok(SqliteSubscriber {
            store: self.store.clone(),
            consumer: consumer.to_string(),
            options,
            buffer: VecDeque::new(),
        })
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
                    .filter(|(_, p)| crate::topic::matches(p, key))
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
                .bind(m.headers.get(postroom_core::message::headers::ORIGINAL_ROUTE).map_or(m.route.as_str(), String::as_str))
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

/// A consumer's stream of deliveries from the embedded queue.
pub struct SqliteSubscriber {
    store: SqliteStore,
    consumer: String,
    options: SubscribeOptions,
    buffer: VecDeque<SqliteDelivery>,
}

impl SqliteSubscriber {
    async fn fetch(&mut self) -> Result<()> {
        let now = now_ms();
        let token = uuid::Uuid::now_v7().to_string();
        let mut tx = self.store.begin().await?;
        let rows = sqlx::query(
            "SELECT seq, message_id, routing_key, headers, body, deliveries FROM postroom_queue
             WHERE consumer = ?1 AND visible_at <= ?2 AND (leased_until IS NULL OR leased_until < ?2)
             ORDER BY visible_at, seq LIMIT ?3",
        )
        .bind(&self.consumer)
        .bind(now)
        .bind(self.options.prefetch as i64)
        .fetch_all(&mut *tx)
        .await
        .db()?;
        for row in &rows {
            let seq: i64 = row.get("seq");
            sqlx::query("UPDATE postroom_queue SET lease_token = ?, leased_until = ?, deliveries = deliveries + 1, stage = NULL WHERE seq = ?")
                .bind(&token)
                .bind(now + ms(self.options.lease))
                .bind(seq)
                .execute(&mut *tx)
                .await
                .db()?;
        }
        tx.commit().await.db()?;
        for row in rows {
            let id: Option<String> = row.get("message_id");
            let headers: String = row.get("headers");
            self.buffer.push_back(SqliteDelivery {
                store: self.store.clone(),
                seq: row.get("seq"),
                token: token.clone(),
                message: ReceivedMessage {
                    id: id.and_then(|s| s.parse().ok()),
                    routing_key: row.get("routing_key"),
                    headers: serde_json::from_str(&headers).unwrap_or_default(),
                    body: row.get("body"),
                    redelivered: row.get::<i64, _>("deliveries") > 0,
                },
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Subscriber for SqliteSubscriber {
    type Delivery = SqliteDelivery;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<SqliteDelivery>> {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            if let Some(d) = self.buffer.pop_front() {
                return Ok(Some(d));
            }
            self.fetch().await?;
            if !self.buffer.is_empty() {
                continue;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(self.options.poll_interval.min(deadline - now)).await;
        }
    }
}

/// One leased message.
pub struct SqliteDelivery {
    store: SqliteStore,
    seq: i64,
    token: String,
    message: ReceivedMessage,
}

impl SqliteDelivery {
    fn lease_lost(&self) -> Error {
        Error::new(
            ErrorKind::Closed,
            "the lease on this delivery expired and another consumer took it",
        )
    }
}

#[async_trait]
impl Delivery for SqliteDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.message
    }

    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        let r = sqlx::query("DELETE FROM postroom_queue WHERE seq = ? AND lease_token = ?")
            .bind(self.seq)
            .bind(&self.token)
            .execute(self.store.pool())
            .await;
        match r {
            Ok(r) if r.rows_affected() == 1 => Ok(()),
            Ok(_) => Err((self.lease_lost(), self)),
            Err(e) => Err((crate::error::map(e), self)),
        }
    }

    /// The copy keeps its id; attempt and diagnostics go into its headers; it becomes visible
    /// after the delay. Publishing the copy and acking the original are one statement.
    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        let headers = postroom_core::consumer::retry_headers(&self.message, plan);
        let r = sqlx::query(
            "UPDATE postroom_queue SET headers = ?, visible_at = ?, stage = ?, lease_token = NULL, leased_until = NULL
             WHERE seq = ? AND lease_token = ?",
        )
        .bind(serde_json::to_string(&headers).expect("headers serialise"))
        .bind(now_ms() + ms(plan.delay))
        .bind(plan.stage as i64)
        .bind(self.seq)
        .bind(&self.token)
        .execute(self.store.pool())
        .await;
        match r {
            Ok(r) if r.rows_affected() == 1 => Ok(()),
            Ok(_) => Err((self.lease_lost(), self)),
            Err(e) => Err((crate::error::map(e), self)),
        }
    }

    /// The parking row and the removal from the queue commit together.
    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        let result: Result<bool> = async {
            let mut tx = self.store.begin().await?;
            crate::parking::insert(&mut tx, record).await?;
            let r = sqlx::query("DELETE FROM postroom_queue WHERE seq = ? AND lease_token = ?")
                .bind(self.seq)
                .bind(&self.token)
                .execute(&mut *tx)
                .await
                .db()?;
            if r.rows_affected() != 1 {
                return Ok(false);
            }
            tx.commit().await.db()?;
            Ok(true)
        }
        .await;
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err((self.lease_lost(), self)),
            Err(e) => Err((e, self)),
        }
    }
}

#[async_trait]
impl BacklogProbe for SqliteStore {
    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        let now = now_ms();
        let row = sqlx::query(
            "SELECT
                COALESCE(SUM(CASE WHEN visible_at <= ?2 AND (leased_until IS NULL OR leased_until < ?2) THEN 1 ELSE 0 END), 0) AS ready,
                COALESCE(SUM(CASE WHEN leased_until >= ?2 THEN 1 ELSE 0 END), 0) AS unacked,
                COALESCE(SUM(CASE WHEN visible_at > ?2 AND (leased_until IS NULL OR leased_until < ?2) THEN 1 ELSE 0 END), 0) AS delayed,
                MIN(CASE WHEN visible_at <= ?2 AND (leased_until IS NULL OR leased_until < ?2) THEN visible_at END) AS oldest
             FROM postroom_queue WHERE consumer = ?1",
        )
        .bind(consumer)
        .bind(now)
        .fetch_one(self.pool())
        .await
        .db()?;
        let oldest: Option<i64> = row.get("oldest");
        let backlog = Backlog {
            ready: row.get::<i64, _>("ready") as u64,
            unacked: row.get::<i64, _>("unacked") as u64,
            delayed: row.get::<i64, _>("delayed") as u64,
            oldest_ready_age: oldest.map(|t| {
                (chrono::Utc::now() - from_ms(t))
                    .to_std()
                    .unwrap_or_default()
            }),
        };
        let pm = postroom_core::metrics::OLDEST_READY_AGE;
        metrics::gauge!(pm, "consumer" => consumer.to_string())
            .set(backlog.oldest_ready_age.map_or(0.0, |d| d.as_secs_f64()));
        Ok(backlog)
    }
}
