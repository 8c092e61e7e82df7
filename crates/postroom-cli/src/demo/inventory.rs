//! The inventory service's handler: reserve stock for `order.created`, through the inbox, in
//! one transaction; out of stock is a business outcome published through its own outbox.

use postroom_core::{
    Envelope, Handled, Handler, HandlerError, Incoming, OutgoingMessage, async_trait,
};
use postroom_sqlite::{SqliteStore, inbox, outbox};
use serde::Deserialize;
use std::io::Write;

/// Consumer name.
pub const CONSUMER: &str = "inventory";

#[derive(Deserialize)]
struct OrderCreated {
    order_id: String,
    sku: String,
    qty: i64,
}

/// The handler.
pub struct InventoryHandler {
    /// Store.
    pub store: SqliteStore,
    /// Order whose handling stops after COMMIT, before the ack, once (to be killed).
    pub crash_order: Option<String>,
}

fn db(e: sqlx::Error) -> HandlerError {
    HandlerError::from(postroom_sqlite::map_error(e))
}

#[async_trait]
impl Handler for InventoryHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let env = &m.envelope;
        let order: OrderCreated = serde_json::from_value(env.data.clone()).map_err(|e| {
            HandlerError::permanent("bad_payload", format!("order.created data: {e}"))
        })?;
        let now = chrono::Utc::now().timestamp_millis();
        sqlx::query("INSERT INTO demo_attempts (message_id, attempt, at) VALUES (?, ?, ?)")
            .bind(env.id.to_string())
            .bind(i64::from(m.attempt))
            .bind(now)
            .execute(self.store.pool())
            .await
            .map_err(db)?;
        // Injected fault: the inventory database is "down" for the first N attempts.
        let fail_times: Option<i64> =
            sqlx::query_scalar("SELECT fail_times FROM demo_faults WHERE order_id = ?")
                .bind(&order.order_id)
                .fetch_optional(self.store.pool())
                .await
                .map_err(db)?;
        if let Some(n) = fail_times.filter(|n| i64::from(m.attempt) < *n) {
            return Err(HandlerError::transient(
                "db_unavailable",
                format!(
                    "injected: inventory database unavailable (attempt {} of {n} failing)",
                    m.attempt
                ),
            ));
        }
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, CONSUMER, env.id).await? {
            tx.rollback().await.map_err(db)?;
            sqlx::query("INSERT INTO demo_duplicates (message_id, consumer, at) VALUES (?, ?, ?)")
                .bind(env.id.to_string())
                .bind(CONSUMER)
                .bind(now)
                .execute(self.store.pool())
                .await
                .map_err(db)?;
            return Ok(Handled::Duplicate);
        }
        let available: i64 = sqlx::query_scalar("SELECT available FROM stock WHERE sku = ?")
            .bind(&order.sku)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?
            .ok_or_else(|| {
                HandlerError::permanent(
                    "unknown_sku",
                    format!("no stock record for sku {}", order.sku),
                )
            })?;
        if available < order.qty {
            let rejected: Envelope = env
                .follow_up("inventory.reservation_rejected", CONSUMER)
                .aggregate("order", &order.order_id, env.aggregate.version + 1)
                .data(serde_json::json!({"order_id": order.order_id, "sku": order.sku, "qty": order.qty,
                                         "available": available, "reason": "out_of_stock"}))
                .build();
            outbox::enqueue(
                &mut tx,
                &OutgoingMessage::from_envelope(&rejected, "inventory.reservation_rejected"),
            )
            .await?;
            tx.commit().await.map_err(db)?;
            return Ok(Handled::BusinessOutcome("out_of_stock".into()));
        }
        sqlx::query("UPDATE stock SET available = available - ? WHERE sku = ?")
            .bind(order.qty)
            .bind(&order.sku)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        sqlx::query("INSERT INTO reservations (order_id, sku, qty) VALUES (?, ?, ?)")
            .bind(&order.order_id)
            .bind(&order.sku)
            .bind(order.qty)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        if self.crash_order.as_deref() == Some(order.order_id.as_str()) {
            let first =
                sqlx::query("INSERT OR IGNORE INTO demo_crash (order_id, at) VALUES (?, ?)")
                    .bind(&order.order_id)
                    .bind(now)
                    .execute(self.store.pool())
                    .await
                    .map_err(db)?
                    .rows_affected()
                    == 1;
            if first {
                // Committed, not acked: tell the parent, which kills this process now.
                println!("CRASH-POINT {} {}", order.order_id, env.id);
                let _ = std::io::stdout().flush();
                std::future::pending::<()>().await;
            }
        }
        Ok(Handled::Applied)
    }
}

/// The orders service's handler for `inventory.reservation_rejected`: mark the order rejected.
pub struct RejectionHandler {
    /// Store.
    pub store: SqliteStore,
}

/// Consumer name of the orders service.
pub const ORDERS_CONSUMER: &str = "orders";

#[async_trait]
impl Handler for RejectionHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let order_id = m.envelope.data["order_id"]
            .as_str()
            .ok_or_else(|| {
                HandlerError::permanent("bad_payload", "reservation_rejected without order_id")
            })?
            .to_string();
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, ORDERS_CONSUMER, m.envelope.id).await? {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("UPDATE orders SET status = 'rejected' WHERE id = ?")
            .bind(&order_id)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(Handled::Applied)
    }
}
