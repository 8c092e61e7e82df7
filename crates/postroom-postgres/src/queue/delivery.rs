//! Settling one claimed queue row: ack, retry after a delay, or park. Each act is one
//! transaction that checks the lease token; a failed act hands the delivery back.

use crate::error::{SqlxResultExt, commit};
use crate::parking::row;
use crate::schema::TablePrefix;
use async_trait::async_trait;
use postroom_core::retry::retry_headers;
use postroom_core::transport::Handback;
use postroom_core::{
    Delivery, Error, ErrorKind, ParkedMessage, ReceivedMessage, Result, RetryPlan,
};
use sqlx::PgPool;
use sqlx::postgres::PgQueryResult;
use sqlx::types::Json;

/// A claimed row of `{prefix}queue`.
#[derive(Debug)]
pub struct PgDelivery {
    pool: PgPool,
    prefix: TablePrefix,
    row_id: i64,
    token: uuid::Uuid,
    message: ReceivedMessage,
}

fn lease_lost(act: &str) -> Error {
    Error::new(
        ErrorKind::Closed,
        format!(
            "{act}: the lease on this delivery was lost (another subscriber holds or settled it)"
        ),
    )
}

/// Whether the statement of `act` changed this delivery's row: exactly one row changed means
/// the lease still held; none means it was lost.
fn lease_held(done: &PgQueryResult, act: &str) -> Result<()> {
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(lease_lost(act))
    }
}

impl PgDelivery {
    pub(super) fn new(
        pool: PgPool,
        prefix: TablePrefix,
        row_id: i64,
        token: uuid::Uuid,
        message: ReceivedMessage,
    ) -> Self {
        Self {
            pool,
            prefix,
            row_id,
            token,
            message,
        }
    }

    /// The statement that removes this delivery's row while its lease holds.
    fn delete_sql(&self) -> String {
        format!(
            "DELETE FROM {p}queue WHERE id = $1 AND lease_token = $2",
            p = self.prefix
        )
    }

    async fn try_ack(&self) -> Result<()> {
        let done = sqlx::query(&self.delete_sql())
            .bind(self.row_id)
            .bind(self.token)
            .execute(&self.pool)
            .await
            .pg()?;
        lease_held(&done, "ack")
    }

    async fn try_retry(&self, plan: &RetryPlan) -> Result<()> {
        let headers = retry_headers(&self.message, plan);
        let sql = format!(
            "UPDATE {p}queue SET headers = $3, attempt = $4, visible_at = now() + make_interval(secs => $5),
                 lease_owner = NULL, lease_token = NULL, leased_until = NULL
             WHERE id = $1 AND lease_token = $2",
            p = self.prefix
        );
        let done = sqlx::query(&sql)
            .bind(self.row_id)
            .bind(self.token)
            .bind(Json(&headers))
            .bind(i32::try_from(plan.attempt).unwrap_or(i32::MAX))
            .bind(plan.delay.as_secs_f64())
            .execute(&self.pool)
            .await
            .pg()?;
        lease_held(&done, "retry")
    }

    async fn try_park(&self, record: &ParkedMessage) -> Result<()> {
        let mut tx = self.pool.begin().await.pg()?;
        row::insert(&mut tx, &self.prefix, record).await?;
        let done = sqlx::query(&self.delete_sql())
            .bind(self.row_id)
            .bind(self.token)
            .execute(&mut *tx)
            .await
            .pg()?;
        // On a lost lease, dropping the transaction rolls the parking row back.
        lease_held(&done, "park")?;
        commit(tx).await
    }
}

#[async_trait]
impl Delivery for PgDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.message
    }

    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        let outcome = self.try_ack().await;
        outcome.map_err(|e| (e, self))
    }

    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        let outcome = self.try_retry(plan).await;
        outcome.map_err(|e| (e, self))
    }

    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        let outcome = self.try_park(record).await;
        outcome.map_err(|e| (e, self))
    }
}
