//! Scheduled rows under the WAL relay. The log hands a row over at its commit, long before it
//! may be published, so the stream leaves scheduled rows out (it only notes that a transaction
//! wrote some) and a timer publishes them once they fall due: core's claiming relay over
//! [`DueRows`], an outbox of the scheduled rows that fell due alone. It claims them with leases
//! and marks them published (the only rows the WAL relay writes to), and it sleeps until the
//! next row falls due, a transaction the stream read wrote scheduled rows, or the poll passes
//! (for rows written while this relay stood by).
//!
//! Every relay of the slot runs the timer, standing by or not: claims are leased, so each due
//! row goes out once, as between claiming relays.

use crate::error::SqlxResultExt;
use crate::outbox::{PgOutbox, due_claim_sql, record_of_row};
use crate::schema::TablePrefix;
use postroom_core::{MessageId, OutboxRecord, OutboxStore, Result, async_trait};
use sqlx::{PgPool, Row};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What the stream tells the timer: a committed transaction wrote scheduled rows.
#[derive(Debug, Default)]
pub(crate) struct ScheduledSignal(Notify);

impl ScheduledSignal {
    /// A transaction that wrote scheduled rows committed: the timer looks at once.
    pub(crate) fn committed(&self) {
        self.0.notify_one();
    }
}

/// The outbox's scheduled rows that fell due, as an [`OutboxStore`] for core's relay.
pub(crate) struct DueRows {
    pool: PgPool,
    outbox: PgOutbox,
    claim_sql: String,
    pending_sql: String,
    signal: std::sync::Arc<ScheduledSignal>,
    next_due: crate::outbox::wakeup::NextDue,
}

impl DueRows {
    pub(crate) fn new(
        pool: PgPool,
        prefix: &TablePrefix,
        signal: std::sync::Arc<ScheduledSignal>,
    ) -> Self {
        Self {
            outbox: PgOutbox::new(pool.clone(), prefix.clone()),
            pool,
            claim_sql: due_claim_sql(prefix),
            pending_sql: format!(
                "SELECT count(*) FROM {prefix}outbox WHERE published_at IS NULL AND not_before IS NOT NULL"
            ),
            signal,
            next_due: crate::outbox::wakeup::NextDue::default(),
        }
    }

    fn set_next_due(&self, seconds: Option<f64>) {
        self.next_due.set_in(seconds);
    }

    fn next_due(&self) -> Option<Instant> {
        self.next_due.get()
    }
}

#[async_trait]
impl OutboxStore for DueRows {
    async fn claim(
        &self,
        relay_id: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxRecord>> {
        let rows = sqlx::query(&self.claim_sql)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(relay_id)
            .bind(lease.as_secs_f64())
            .fetch_all(&self.pool)
            .await
            .pg()?;
        if let Some(row) = rows.first() {
            self.set_next_due(row.try_get("next_due_in").pg()?);
        }
        let mut recs = Vec::with_capacity(rows.len());
        for row in &rows {
            if row.try_get::<Option<i64>, _>("seq").pg()?.is_some() {
                recs.push(record_of_row(row)?);
            }
        }
        Ok(recs)
    }

    async fn mark_published(&self, relay_id: &str, ids: &[MessageId]) -> Result<()> {
        self.outbox.mark_published(relay_id, ids).await
    }

    async fn release(
        &self,
        relay_id: &str,
        id: MessageId,
        error: &str,
        retry_after: Duration,
    ) -> Result<()> {
        self.outbox.release(relay_id, id, error, retry_after).await
    }

    async fn purge_published(&self, older_than: Duration) -> Result<u64> {
        self.outbox.purge_published(older_than).await
    }

    async fn pending(&self) -> Result<u64> {
        crate::fetch_count(&self.pool, sqlx::query(&self.pending_sql)).await
    }

    async fn wait_for_rows(&self, _relay_id: &str, max_wait: Duration) {
        let wait = match self.next_due() {
            Some(due) => max_wait.min(due.saturating_duration_since(Instant::now())),
            None => max_wait,
        };
        let _ = tokio::time::timeout(wait, self.signal.0.notified()).await;
    }
}
