//! Inbox-queue mode (R6, seed 003): persist, then ack.
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
use postroom_core::consumer::ConsumerConfig;
use postroom_core::{
    Delivery, Envelope, Error, ErrorKind, Handler, MessageId, ReceivedMessage, Result, Subscriber,
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

    /// Store `msg`; `true` when it is new (or was parked and comes back by a redrive), `false`
    /// for a duplicate. In ordered mode the key and sequence are the envelope's aggregate key
    /// and version; an undecodable body is stored without them (and parked by a worker).
    pub async fn store(&self, msg: &ReceivedMessage) -> Result<bool> {
        let envelope: Option<Envelope> = serde_json::from_slice(&msg.body).ok();
        let id = msg
            .id
            .or(envelope.as_ref().map(|e| e.id))
            .unwrap_or_default();
        let (key, seq) = match (&self.config.ordered, &envelope) {
            (Some(_), Some(e)) => (
                Some(e.aggregate.key()),
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
             WHERE q.status = 'parked'",
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
    pub async fn ingest<S: Subscriber>(
        &self,
        mut subscriber: S,
        mut shutdown: watch::Receiver<bool>,
    ) {
        while !*shutdown.borrow() {
            let next = tokio::select! {
                n = subscriber.next(self.config.poll_interval.max(Duration::from_millis(100))) => n,
                _ = shutdown.changed() => continue,
            };
            let delivery = match next {
                Ok(Some(d)) => d,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "inbox queue: receive failed");
                    tokio::time::sleep(self.config.poll_interval).await;
                    continue;
                }
            };
            if let Err(e) = self.store(delivery.message()).await {
                tracing::warn!(error = %e, "inbox queue: store failed; leaving the delivery unacked");
                tokio::time::sleep(self.config.poll_interval).await;
                continue;
            }
            let mut d = delivery;
            for try_no in 0..3u32 {
                match d.ack().await {
                    Ok(()) => break,
                    Err((e, back)) => {
                        tracing::warn!(error = %e, try_no, "inbox queue: ack failed; the copy will be deduplicated");
                        d = back;
                    }
                }
            }
        }
    }

    /// Run `config.workers` workers with `handler` until `shutdown` turns true; returns once
    /// every worker has finished its current row.
    pub async fn run_workers<H: Handler + ?Sized>(
        &self,
        handler: Arc<H>,
        shutdown: watch::Receiver<bool>,
    ) {
        let mut tasks = Vec::with_capacity(self.config.workers);
        for n in 0..self.config.workers {
            let w = worker::Worker::new(
                self.clone(),
                handler.clone(),
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
        let done = sqlx::query(&sql)
            .bind(older_than.as_secs_f64())
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(done.rows_affected())
    }

    /// Rows not yet done or parked.
    pub async fn pending(&self) -> Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM {p}inbox_queue WHERE consumer = $1 AND status = 'pending'",
            p = self.prefix
        );
        let n: i64 = sqlx::query_scalar(&sql)
            .bind(&self.config.consumer.name)
            .fetch_one(&self.pool)
            .await
            .pg()?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
