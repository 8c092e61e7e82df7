//! Claiming visible queue rows under a lease.

use super::{PgDelivery, QueueConfig};
use crate::error::SqlxResultExt;
use crate::lease;
use crate::schema::TablePrefix;
use async_trait::async_trait;
use postroom_core::{Headers, Result, Subscriber};
use sqlx::types::Json;
use sqlx::{PgPool, Row};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// One consumer's stream of deliveries from a [`super::PgQueue`].
#[derive(Debug)]
pub struct PgSubscriber {
    pool: PgPool,
    prefix: TablePrefix,
    consumer: String,
    owner: String,
    config: QueueConfig,
    buffer: VecDeque<PgDelivery>,
}

impl PgSubscriber {
    pub(super) fn new(
        pool: PgPool,
        prefix: TablePrefix,
        consumer: String,
        config: QueueConfig,
    ) -> Self {
        let owner = format!(
            "{}-{}",
            std::process::id(),
            &uuid::Uuid::now_v7().simple().to_string()[20..]
        );
        Self {
            pool,
            prefix,
            consumer,
            owner,
            config,
            buffer: VecDeque::new(),
        }
    }

    /// The consumer this subscriber serves.
    #[must_use]
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Claim up to `prefetch` visible rows; they stay leased for `lease`.
    async fn claim(&mut self) -> Result<()> {
        let sql = format!(
            "WITH c AS (
                SELECT id FROM {p}queue
                WHERE consumer = $1 AND visible_at <= now() AND (leased_until IS NULL OR leased_until < now())
                ORDER BY visible_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
             UPDATE {p}queue q SET lease_owner = $3, lease_token = gen_random_uuid(),
                 leased_until = now() + make_interval(secs => $4), delivery_count = q.delivery_count + 1
             FROM c WHERE q.id = c.id
             RETURNING q.id, q.message_id, q.routing_key, q.headers, q.body, q.lease_token, q.delivery_count, q.visible_at",
            p = self.prefix
        );
        let rows = lease::claim_rows(
            &self.pool,
            &sql,
            &self.consumer,
            i64::try_from(self.config.prefetch).unwrap_or(i64::MAX),
            &self.owner,
            self.config.lease,
        )
        .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for r in rows {
            let headers: Json<Headers> = r.try_get("headers").pg()?;
            let count: i32 = r.try_get("delivery_count").pg()?;
            let message = lease::received(&r, headers.0)?
                .redelivered(count > 1)
                .deliveries(u32::try_from(count).unwrap_or(0));
            let visible_at: chrono::DateTime<chrono::Utc> = r.try_get("visible_at").pg()?;
            let row_id: i64 = r.try_get("id").pg()?;
            let token: uuid::Uuid = r.try_get("lease_token").pg()?;
            claimed.push((
                (visible_at, row_id),
                PgDelivery::new(
                    self.pool.clone(),
                    self.prefix.clone(),
                    row_id,
                    token,
                    message,
                ),
            ));
        }
        claimed.sort_by_key(|(k, _)| *k);
        self.buffer.extend(claimed.into_iter().map(|(_, d)| d));
        Ok(())
    }
}

#[async_trait]
impl Subscriber for PgSubscriber {
    type Delivery = PgDelivery;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<PgDelivery>> {
        let deadline = Instant::now() + max_wait;
        loop {
            if let Some(d) = self.buffer.pop_front() {
                return Ok(Some(d));
            }
            self.claim().await?;
            if !self.buffer.is_empty() {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(self.config.poll_interval.min(deadline - now)).await;
        }
    }
}
