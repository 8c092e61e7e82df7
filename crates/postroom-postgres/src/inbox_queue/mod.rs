//! Inbox-queue mode: persist, then ack.
//!
//! The subscriber side ([`InboxQueue::ingest`]) only stores each message in
//! `{prefix}inbox_queue` (deduplicated by `(consumer, message_id)`) and acknowledges it at
//! once, so the broker's partitions and prefetch no longer bound the work in flight.
//! [`InboxQueue::run_workers`] starts N workers that claim rows with `locked_until` leases and
//! `FOR UPDATE SKIP LOCKED`, run the handler, and mark each row done, or record the error and
//! make it visible again after the retry ladder's delay, or park it when the budget is spent.
//!
//! Ordered mode ([`OrderedMode`]): rows carry the aggregate key and version as a monotonic
//! sequence; a worker only takes the earliest pending row of a key, and when that row is ahead
//! of the last applied sequence (a gap), waits up to `gap_wait` for the missing ones, then
//! parks it with `version_gap` and raises an alert. A key stays blocked behind a gap until
//! the missing message arrives or an operator acts.
//!
//! Delivery into the handler is at least once: the row is marked done after the handler
//! returns, so the handler claims the inbox ([`crate::inbox::claim`]) in its own transaction,
//! as every postroom handler does.

mod claim;
mod worker;

use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::consumer::{ConsumerConfig, Step};
use postroom_core::inbox_feed::{FeedCounts, InboxFeed, run_feed};
use postroom_core::{
    Envelope, Error, ErrorKind, Handler, MessageId, ReceivedMessage, Result, Subscriber,
};
use sqlx::PgPool;
use sqlx::types::Json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Ordered processing per key.
#[derive(Clone, Debug)]
pub struct OrderedMode {
    /// Longest wait for a missing sequence before the waiting message is parked.
    pub gap_wait: Duration,
    /// How often a message waiting behind a gap is looked at again.
    pub recheck: Duration,
}

/// Settings of an inbox queue.
#[derive(Clone, Debug)]
pub struct InboxQueueConfig {
    /// Consumer name, version, decoder, retry policy and handler timeout.
    pub consumer: ConsumerConfig,
    /// Workers processing at once (≥ 1).
    pub workers: usize,
    /// Rows a worker claims at once (≥ 1).
    pub batch: usize,
    /// Lease on a claimed row; must exceed the handler timeout.
    pub lease: Duration,
    /// Pause of an idle worker or ingest loop.
    pub poll_interval: Duration,
    /// Ordered mode, or `None` for no ordering.
    pub ordered: Option<OrderedMode>,
}

impl InboxQueueConfig {
    /// Defaults: 8 workers, batch 1, 60 s lease, 100 ms poll, unordered.
    #[must_use]
    pub fn new(consumer: ConsumerConfig) -> Self {
        Self {
            consumer,
            workers: 8,
            batch: 1,
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_millis(100),
            ordered: None,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::new(ErrorKind::Config, m.to_string()));
        if self.workers == 0 || self.batch == 0 {
            return bad("inbox queue workers and batch must be at least 1");
        }
        if self.lease <= self.consumer.handler_timeout {
            return bad("the inbox queue lease must be longer than the handler timeout");
        }
        if self.poll_interval.is_zero() {
            return bad("the poll interval must be longer than zero");
        }
        Ok(())
    }
}

/// The `x-redrive-count` header of a `headers` JSONB expression as a number (0 when absent or
/// not a number).
fn redrive_count_sql(headers: &str) -> String {
    format!(
        "(CASE WHEN {headers}->>'{h}' ~ '^[0-9]{{1,9}}$' THEN ({headers}->>'{h}')::int ELSE 0 END)",
        h = postroom_core::message::headers::REDRIVE_COUNT
    )
}

#[postroom_core::async_trait]
impl InboxFeed for InboxQueue {
    fn consumer(&self) -> &str {
        &self.config.consumer.name
    }

    async fn store(&self, msg: &ReceivedMessage) -> Result<bool> {
        InboxQueue::store(self, msg).await
    }
}

/// One consumer's inbox queue.
#[derive(Clone, Debug)]
pub struct InboxQueue {
    pool: PgPool,
    prefix: TablePrefix,
    config: Arc<InboxQueueConfig>,
}

impl InboxQueue {
    /// An inbox queue in `pool` under `prefix` (migrated beforehand).
    pub fn new(pool: PgPool, prefix: TablePrefix, config: InboxQueueConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            pool,
            prefix,
            config: Arc::new(config),
        })
    }

    /// Store `msg`; `true` when it is new (or was parked and comes back by a redrive: its
    /// `x-redrive-count` is higher than the parked copy's), `false` for a duplicate. A
    /// duplicate delivery never brings a parked row back: only an operator's redrive does. In ordered mode the key and sequence are the envelope's aggregate key
    /// and version; a message without an aggregate is stored without them (unordered), and
    /// so is an undecodable body (parked by a worker).
    pub async fn store(&self, msg: &ReceivedMessage) -> Result<bool> {
        let envelope: Option<Envelope> = serde_json::from_slice(&msg.body).ok();
        let id = msg
            .id
            .or(envelope.as_ref().map(|e| e.id))
            .unwrap_or_default();
        let (key, seq) = match (&self.config.ordered, &envelope) {
            (Some(_), Some(e)) if !e.aggregate.is_unset() => (
                e.aggregate.ordering_key(),
                i64::try_from(e.aggregate.version).ok(),
            ),
            _ => (None, None),
        };
        let sql = format!(
            "INSERT INTO {p}inbox_queue AS q (consumer, message_id, routing_key, headers, body, order_key, order_seq)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (consumer, message_id) DO UPDATE SET
                 status = 'pending', attempts = 0, available_at = now(), headers = EXCLUDED.headers,
                 last_error = NULL, gap_since = NULL, locked_by = NULL, locked_until = NULL
             WHERE q.status = 'parked' AND {redriven} > {parked}",
            redriven = redrive_count_sql("EXCLUDED.headers"),
            parked = redrive_count_sql("q.headers"),
            p = self.prefix
        );
        let done = sqlx::query(&sql)
            .bind(&self.config.consumer.name)
            .bind(id.as_uuid())
            .bind(&msg.routing_key)
            .bind(Json(&msg.headers))
            .bind(&msg.body)
            .bind(key)
            .bind(seq)
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(done.rows_affected() == 1)
    }

    /// Persist-then-ack until `shutdown` turns true: each delivery is stored, then acked. A
    /// failed store leaves the delivery unacked (the transport redelivers it).
    pub async fn ingest<S: Subscriber>(&self, subscriber: S, shutdown: watch::Receiver<bool>) {
        self.feed("default", subscriber, shutdown).await;
    }

    /// [`InboxQueue::ingest`] under a feed name (the metrics' `feed` label): several feeds
    /// (one per broker while a system moves between brokers) may fill the same queue at once,
    /// deduplicated by message id; returns what this feed stored and found already there.
    pub async fn feed<S: Subscriber>(
        &self,
        feed: &str,
        subscriber: S,
        shutdown: watch::Receiver<bool>,
    ) -> FeedCounts {
        run_feed(self, feed, subscriber, self.config.poll_interval, shutdown).await
    }

    /// Run `config.workers` workers with `handler` until `shutdown` turns true; returns once
    /// every worker has finished its current row.
    pub async fn run_workers<H: Handler + ?Sized>(
        &self,
        handler: Arc<H>,
        shutdown: watch::Receiver<bool>,
    ) {
        // One decision step for all workers: they share the circuit breaker and counters.
        let step = Step::new(self.config.consumer.clone(), handler);
        self.run_workers_on(step, shutdown).await;
    }

    /// [`run_workers`](Self::run_workers) with a decision step of the caller's (made from
    /// this queue's consumer settings), whose counters (`step.stats()`) the caller reads.
    pub async fn run_workers_on<H: Handler + ?Sized>(
        &self,
        step: Step<H>,
        shutdown: watch::Receiver<bool>,
    ) {
        let mut tasks = Vec::with_capacity(self.config.workers);
        for n in 0..self.config.workers {
            let w = worker::Worker::new(
                self.clone(),
                step.clone(),
                format!("{}-w{n}-{}", self.config.consumer.name, MessageId::new()),
            );
            tasks.push(tokio::spawn(w.run(shutdown.clone())));
        }
        for t in tasks {
            let _ = t.await;
        }
    }

    /// Delete rows done more than `older_than` ago. They are the dedup record of this mode,
    /// so keep them for the replay window (see [`crate::inbox`]). Returns how many.
    pub async fn purge_done(&self, older_than: Duration) -> Result<u64> {
        let sql = format!(
            "DELETE FROM {p}inbox_queue WHERE status = 'done' AND done_at < now() - make_interval(secs => $1)",
            p = self.prefix
        );
        crate::error::delete_older_than(&self.pool, &sql, older_than).await
    }

    /// Rows not yet done or parked.
    pub async fn pending(&self) -> Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM {p}inbox_queue WHERE consumer = $1 AND status = 'pending'",
            p = self.prefix
        );
        let q = sqlx::query(&sql).bind(&self.config.consumer.name);
        crate::fetch_count(&self.pool, q).await
    }
}
