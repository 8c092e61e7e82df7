//! A consumer's stream of deliveries: fetch visible rows under a lease.

use super::{QueueConfig, SqliteDelivery};
use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::{ms, now_ms};
use postroom_core::{ReceivedMessage, Result, Subscriber, async_trait};
use sqlx::Row;
use std::collections::VecDeque;
use std::time::Duration;

/// A consumer's stream of deliveries from the embedded queue.
pub struct SqliteSubscriber {
    store: SqliteStore,
    consumer: String,
    options: QueueConfig,
    buffer: VecDeque<SqliteDelivery>,
}

impl SqliteSubscriber {
    pub(super) fn new(store: SqliteStore, consumer: String, options: QueueConfig) -> Self {
        Self {
            store,
            consumer,
            options,
            buffer: VecDeque::new(),
        }
    }

    /// The consumer this subscriber serves.
    #[must_use]
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

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
            // The count before this fetch's increment: this delivery is one more.
            let before: i64 = row.get("deliveries");
            let message = ReceivedMessage::new(
                id.and_then(|s| s.parse().ok()),
                row.get::<String, _>("routing_key"),
                serde_json::from_str(&headers).unwrap_or_default(),
                row.get("body"),
            )
            .redelivered(before > 0)
            .deliveries(u32::try_from(before.saturating_add(1)).unwrap_or(u32::MAX));
            self.buffer.push_back(SqliteDelivery {
                store: self.store.clone(),
                seq: row.get("seq"),
                token: token.clone(),
                message,
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
