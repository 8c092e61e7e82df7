//! Settling one leased message: ack, retry after a delay, or park. Each act checks the
//! lease token; a failed act hands the delivery back.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::time::due_ms;
use postroom_core::transport::Handback;
use postroom_core::{
    Delivery, Error, ErrorKind, ParkedMessage, ReceivedMessage, Result, RetryPlan, async_trait,
};
use sqlx::Sqlite;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;

/// One leased message.
pub struct SqliteDelivery {
    pub(super) store: SqliteStore,
    pub(super) seq: i64,
    pub(super) token: String,
    pub(super) message: ReceivedMessage,
}

/// Removes a leased message while its lease holds.
const DELETE_LEASED: &str = "DELETE FROM postroom_queue WHERE seq = ? AND lease_token = ?";

impl SqliteDelivery {
    fn lease_lost(&self) -> Error {
        Error::new(
            ErrorKind::Closed,
            "the lease on this delivery expired and another consumer took it",
        )
    }

    /// Runs `statement`, whose last two parameters are this delivery's sequence number and
    /// lease token (bound here), to settle this delivery on its own: done when it changed the
    /// one leased row, a lost lease when it changed none, or the database's error.
    async fn settle<'q>(&'q self, statement: Query<'q, Sqlite, SqliteArguments<'q>>) -> Result<()> {
        let executed = statement
            .bind(self.seq)
            .bind(&self.token)
            .execute(self.store.pool())
            .await;
        match executed {
            Ok(r) if r.rows_affected() == 1 => Ok(()),
            Ok(_) => Err(self.lease_lost()),
            Err(e) => Err(crate::error::map(e)),
        }
    }
}

#[async_trait]
impl Delivery for SqliteDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.message
    }

    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        let outcome = self.settle(sqlx::query(DELETE_LEASED)).await;
        outcome.map_err(|e| (e, self))
    }

    /// The copy keeps its id; attempt and diagnostics go into its headers; it becomes visible
    /// after the delay. Publishing the copy and acking the original are one statement.
    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        let headers = postroom_core::retry::retry_headers(&self.message, plan);
        let statement = sqlx::query(
            "UPDATE postroom_queue SET headers = ?, visible_at = ?, stage = ?, lease_token = NULL, leased_until = NULL
             WHERE seq = ? AND lease_token = ?",
        )
        .bind(serde_json::to_string(&headers).expect("headers serialise"))
        .bind(due_ms(plan.delay))
        .bind(plan.stage as i64);
        let outcome = self.settle(statement).await;
        outcome.map_err(|e| (e, self))
    }

    /// The parking row and the removal from the queue commit together.
    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        let result: Result<bool> = async {
            let mut tx = self.store.begin().await?;
            crate::parking::insert(&mut tx, record).await?;
            let r = sqlx::query(DELETE_LEASED)
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
