//! The outbox table under the WAL relay: rows are only inserted on the hot path. The relay
//! records, at most once a second, where its slot stands (the position row); retention then
//! deletes in bulk the rows the slot has passed, once older than the retention. And when a
//! slot is lost, the rows it had not passed are what [`WalRelay::recreate_slot`] republishes.

use super::lsn::Lsn;
use super::relay::WalRelay;
use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::{Error, ErrorKind, Publisher, Result};
use sqlx::{PgPool, Row};
use std::time::Duration;

/// Rows republished per statement by [`WalRelay::recreate_slot`].
const REPUBLISH_CHUNK: i64 = 500;

/// How long before the position row's time a row may have been written and still not be
/// covered by it (a producer's transaction open that long): such rows are republished too.
const LONGEST_PRODUCER_TRANSACTION: &str = "10 minutes";

/// Write the position row (`confirmed`, and the outbox `seq` up to which the slot passed and
/// published every row it read) and, with `purge`, delete the rows the slot passed that are
/// older than it. Failures are logged: neither is needed for correctness (the slot holds the
/// position), and both are tried again soon.
pub(crate) async fn keep_position(
    pool: PgPool,
    prefix: TablePrefix,
    slot: String,
    confirmed: Lsn,
    published_seq: Option<i64>,
    purge: Option<Duration>,
) {
    let lsn = confirmed.to_string();
    if let Err(e) = super::slot::write_position(&pool, &prefix, &slot, &lsn, published_seq).await {
        tracing::warn!(slot, error = %e, "writing the WAL relay's position row failed");
        return;
    }
    if let Some(older_than) = purge {
        let sql = format!(
            "DELETE FROM {prefix}outbox
             WHERE seq <= (SELECT published_seq FROM {prefix}wal_position WHERE slot = $2)
               AND published_at IS NULL AND not_before IS NULL
               AND created_at < now() - make_interval(secs => $1)"
        );
        match sqlx::query(&sql)
            .bind(older_than.as_secs_f64())
            .bind(&slot)
            .execute(&pool)
            .await
        {
            Ok(done) if done.rows_affected() > 0 => {
                tracing::info!(
                    slot,
                    deleted = done.rows_affected(),
                    "outbox rows the slot passed deleted by retention"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(slot, error = %e, "outbox retention failed"),
        }
    }
}

impl<P: Publisher + ?Sized + 'static> WalRelay<P> {
    /// The way back from a slot that was invalidated or dropped: drop what is left of it,
    /// create it again (from now on every commit is read), then republish, in order, every
    /// outbox row it had not passed (after the position row's `published_seq`, and any row
    /// written within ten minutes before the position was last recorded). Returns how many
    /// rows were republished. Some may have been published before: the consumers' inbox
    /// absorbs the copies. Table-less messages the lost slot had not passed are gone: there is
    /// no table to republish them from.
    ///
    /// Run it with every relay of the slot stopped.
    pub async fn recreate_slot(&self) -> Result<u64> {
        self.wait_until_unread().await?;
        let _ = sqlx::query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&self.slot)
        .execute(&self.pool)
        .await
        .pg()?;
        let p = &self.prefix;
        let row = sqlx::query(&format!(
            "SELECT published_seq, updated_at FROM {p}wal_position WHERE slot = $1"
        ))
        .bind(&self.slot)
        .fetch_optional(&self.pool)
        .await
        .pg()?;
        sqlx::query(&format!("DELETE FROM {p}wal_position WHERE slot = $1"))
            .bind(&self.slot)
            .execute(&self.pool)
            .await
            .pg()?;
        // The new slot first: rows committed from here on are read from it, the older ones
        // from the table (some from both).
        self.prepare().await?;
        let (after, since) = match row {
            Some(r) => (
                r.try_get::<i64, _>("published_seq").pg()?,
                Some(
                    r.try_get::<chrono::DateTime<chrono::Utc>, _>("updated_at")
                        .pg()?,
                ),
            ),
            None => (0, None),
        };
        let mut last = i64::MIN;
        let mut republished = 0u64;
        loop {
            let sql = format!(
                "SELECT seq, id, aggregate_key, route_kind, route, headers, body, created_at, publish_attempts
                 FROM {p}outbox
                 WHERE seq > $1 AND (seq > $2 OR created_at > $3::timestamptz - interval '{LONGEST_PRODUCER_TRANSACTION}')
                   AND not_before IS NULL
                 ORDER BY seq LIMIT $4"
            );
            let rows = sqlx::query(&sql)
                .bind(last)
                .bind(after)
                .bind(since)
                .bind(REPUBLISH_CHUNK)
                .fetch_all(&self.pool)
                .await
                .pg()?;
            let Some(tail) = rows.last() else { break };
            last = tail.try_get("seq").pg()?;
            let mut messages = Vec::with_capacity(rows.len());
            for row in &rows {
                messages.push(crate::outbox::record_of_row(row)?.to_message());
            }
            // One at a time per aggregate, in order: a batch of heads, as the relay sends.
            republished += self.republish_in_order(messages).await?;
        }
        tracing::warn!(slot = %self.slot, republished, "slot recreated; the outbox rows it had not passed were republished");
        Ok(republished)
    }

    /// Wait a little for a relay that just stopped to let go of the slot (the server ends
    /// its reader shortly after the connection closes); an error if one still reads it.
    async fn wait_until_unread(&self) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let active: Option<bool> =
                sqlx::query_scalar("SELECT active FROM pg_replication_slots WHERE slot_name = $1")
                    .bind(&self.slot)
                    .fetch_optional(&self.pool)
                    .await
                    .pg()?;
            if active != Some(true) {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "a relay still reads the slot {:?}: stop every relay of it, then recreate it",
                        self.slot
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn republish_in_order(
        &self,
        messages: Vec<postroom_core::OutgoingMessage>,
    ) -> Result<u64> {
        let mut window = super::window::Window::new(Lsn::ZERO);
        let n = messages.len() as u64;
        window.push_txn(Lsn(1), 0, messages.into_iter().map(|m| (None, m)).collect());
        while window.held() > 0 {
            let now = std::time::Instant::now();
            let Some(batch) = window.next_batch(self.config.batch_size, now) else {
                return Err(Error::new(
                    ErrorKind::Connection,
                    "republishing the outbox rows failed; run recreate_slot again (the slot is in place: only the table's rows are left to send)",
                ));
            };
            let results = self.publisher.publish_batch(&batch.messages).await;
            if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
                return Err(Error::new(
                    e.kind(),
                    format!("republishing the outbox rows failed ({e}); run recreate_slot again"),
                ));
            }
            window.settle(batch, results, now, |_, _| Duration::ZERO);
        }
        Ok(n)
    }
}
