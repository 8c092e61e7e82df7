//! [`ShopDb`] on the embedded SQLite store.

use super::{INVENTORY, InventoryResult, NewOrder, ORDERS, STOCK, ShopDb, ShopFacts, facts};
use postroom_core::ordering::{VersionDecision, check_version};
use postroom_core::{
    Envelope, Error, ErrorKind, MessageId, OutboxStore, OutgoingMessage, ParkingStore, Result,
    Route, async_trait,
};
use postroom_sqlite::{SqliteStore, inbox, map_error as db, outbox};
use sqlx::{Sqlite, SqliteConnection, Transaction};
use std::sync::Arc;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS shop_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_orders (id TEXT PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'created', created_msg TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_stock (sku TEXT PRIMARY KEY, available INTEGER NOT NULL, initial INTEGER NOT NULL);
-- no unique key on order_id on purpose: a double effect would show
CREATE TABLE IF NOT EXISTS shop_reservations (id INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT NOT NULL,
    sku TEXT NOT NULL, qty INTEGER NOT NULL, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_versions (order_id TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS shop_effects (consumer TEXT NOT NULL, message_id TEXT NOT NULL, order_id TEXT NOT NULL,
    version INTEGER NOT NULL, kind TEXT NOT NULL, ord_seq INTEGER NOT NULL, at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS shop_effects_order ON shop_effects (consumer, order_id);
CREATE TABLE IF NOT EXISTS shop_messages (message_id TEXT PRIMARY KEY, order_id TEXT, version INTEGER, kind TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_faults (order_id TEXT PRIMARY KEY, fail_times INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS shop_attempts (message_id TEXT NOT NULL, attempt INTEGER NOT NULL, at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS shop_duplicates (consumer TEXT NOT NULL, message_id TEXT NOT NULL, at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS shop_crash (order_id TEXT PRIMARY KEY, at INTEGER NOT NULL);
DELETE FROM shop_orders; DELETE FROM shop_stock; DELETE FROM shop_reservations; DELETE FROM shop_versions;
DELETE FROM shop_effects; DELETE FROM shop_messages; DELETE FROM shop_faults; DELETE FROM shop_attempts;
DELETE FROM shop_duplicates; DELETE FROM shop_crash;
INSERT OR REPLACE INTO shop_meta (key, value) VALUES ('created_by', 'postroom demo');
";

/// The shop on SQLite.
#[derive(Clone, Debug)]
pub struct SqliteShop {
    /// The store.
    pub store: SqliteStore,
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn bad(m: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidData, m)
}

async fn effect(
    tx: &mut SqliteConnection,
    consumer: &str,
    env: &Envelope,
    order_id: &str,
    kind: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO shop_effects (consumer, message_id, order_id, version, kind, ord_seq, at)
         VALUES (?1, ?2, ?3, ?4, ?5, (SELECT COUNT(*) + 1 FROM shop_effects WHERE consumer = ?1 AND order_id = ?3), ?6)",
    )
    .bind(consumer)
    .bind(env.id.to_string())
    .bind(order_id)
    .bind(env.aggregate.version as i64)
    .bind(kind)
    .bind(now())
    .execute(tx)
    .await
    .map_err(db)?;
    Ok(())
}

async fn rollback(tx: Transaction<'_, Sqlite>) -> Result<()> {
    tx.rollback().await.map_err(db)
}

#[async_trait]
impl ShopDb for SqliteShop {
    async fn reset(&self) -> Result<()> {
        sqlx::raw_sql(SCHEMA)
            .execute(self.store.pool())
            .await
            .map_err(db)?;
        for (sku, n) in STOCK {
            sqlx::query("INSERT INTO shop_stock (sku, available, initial) VALUES (?, ?, ?)")
                .bind(sku)
                .bind(n)
                .bind(n)
                .execute(self.store.pool())
                .await
                .map_err(db)?;
        }
        Ok(())
    }

    async fn create_orders(&self, orders: &[NewOrder], producer: &str) -> Result<Vec<MessageId>> {
        let mut ids = Vec::new();
        let mut tx = self.store.begin().await?;
        for o in orders {
            let events = o.events(producer);
            sqlx::query("INSERT INTO shop_orders (id, sku, qty, created_msg) VALUES (?, ?, ?, ?)")
                .bind(&o.id)
                .bind(&o.sku)
                .bind(o.qty)
                .bind(events[0].id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            if let Some(f) = o.fail_times {
                sqlx::query("INSERT INTO shop_faults (order_id, fail_times) VALUES (?, ?)")
                    .bind(&o.id)
                    .bind(i64::from(f))
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
            for e in &events {
                sqlx::query("INSERT INTO shop_messages (message_id, order_id, version, kind) VALUES (?, ?, ?, 'event')")
                    .bind(e.id.to_string())
                    .bind(&o.id)
                    .bind(e.aggregate.version as i64)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
                outbox::enqueue(
                    &mut tx,
                    &OutgoingMessage::from_envelope(e, e.message_type.clone()),
                )
                .await?;
                ids.push(e.id);
            }
        }
        tx.commit().await.map_err(db)?;
        Ok(ids)
    }

    async fn enqueue_poison(&self, messages: &[OutgoingMessage]) -> Result<()> {
        let mut tx = self.store.begin().await?;
        for m in messages {
            sqlx::query("INSERT INTO shop_messages (message_id, kind) VALUES (?, 'poison')")
                .bind(m.id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            outbox::enqueue(&mut tx, m).await?;
        }
        tx.commit().await.map_err(db)
    }

    async fn fault_for(&self, order_id: &str) -> Result<Option<u32>> {
        let n: Option<i64> =
            sqlx::query_scalar("SELECT fail_times FROM shop_faults WHERE order_id = ?")
                .bind(order_id)
                .fetch_optional(self.store.pool())
                .await
                .map_err(db)?;
        Ok(n.map(|n| n as u32))
    }

    async fn record_attempt(&self, id: MessageId, attempt: u32) -> Result<()> {
        sqlx::query("INSERT INTO shop_attempts (message_id, attempt, at) VALUES (?, ?, ?)")
            .bind(id.to_string())
            .bind(i64::from(attempt))
            .bind(now())
            .execute(self.store.pool())
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn record_duplicate(&self, consumer: &str, id: MessageId) -> Result<()> {
        sqlx::query("INSERT INTO shop_duplicates (consumer, message_id, at) VALUES (?, ?, ?)")
            .bind(consumer)
            .bind(id.to_string())
            .bind(now())
            .execute(self.store.pool())
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn apply_inventory(&self, env: &Envelope) -> Result<InventoryResult> {
        let order_id = env.data["order_id"]
            .as_str()
            .ok_or_else(|| bad("event without order_id"))?;
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, INVENTORY, env.id).await? {
            rollback(tx).await?;
            return Ok(InventoryResult::Duplicate);
        }
        let last: Option<i64> =
            sqlx::query_scalar("SELECT version FROM shop_versions WHERE order_id = ?")
                .bind(order_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
        let last = last.map(|v| v as u64);
        match check_version(last, env.aggregate.version, 1) {
            VersionDecision::Apply => {}
            VersionDecision::AlreadyApplied => {
                tx.commit().await.map_err(db)?;
                return Ok(InventoryResult::Duplicate);
            }
            VersionDecision::Gap { .. } => {
                rollback(tx).await?;
                return Ok(InventoryResult::Gap { last });
            }
        }
        let result = match env.message_type.as_str() {
            "order.created" => {
                let sku = env.data["sku"]
                    .as_str()
                    .ok_or_else(|| bad("order.created without sku"))?;
                let qty = env.data["qty"]
                    .as_i64()
                    .ok_or_else(|| bad("order.created without qty"))?;
                let available: i64 =
                    sqlx::query_scalar("SELECT available FROM shop_stock WHERE sku = ?")
                        .bind(sku)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(db)?
                        .ok_or_else(|| bad(format!("no stock record for sku {sku}")))?;
                if available < qty {
                    let rejected = env
                        .follow_up("inventory.reservation_rejected", INVENTORY)
                        .aggregate("order", order_id, env.aggregate.version)
                        .data(serde_json::json!({"order_id": order_id, "sku": sku, "qty": qty, "available": available, "reason": "out_of_stock"}))
                        .build();
                    outbox::enqueue(
                        &mut tx,
                        &OutgoingMessage::from_envelope(
                            &rejected,
                            "inventory.reservation_rejected",
                        ),
                    )
                    .await?;
                    effect(&mut tx, INVENTORY, env, order_id, "rejected").await?;
                    InventoryResult::Rejected
                } else {
                    sqlx::query("UPDATE shop_stock SET available = available - ? WHERE sku = ?")
                        .bind(qty)
                        .bind(sku)
                        .execute(&mut *tx)
                        .await
                        .map_err(db)?;
                    sqlx::query("INSERT INTO shop_reservations (order_id, sku, qty, status) VALUES (?, ?, ?, 'reserved')")
                        .bind(order_id)
                        .bind(sku)
                        .bind(qty)
                        .execute(&mut *tx)
                        .await
                        .map_err(db)?;
                    effect(&mut tx, INVENTORY, env, order_id, "reserved").await?;
                    InventoryResult::Applied
                }
            }
            "order.cancelled" => {
                let released: Option<(String, i64)> = sqlx::query_as(
                    "UPDATE shop_reservations SET status = 'released' WHERE order_id = ? AND status = 'reserved' RETURNING sku, qty",
                )
                .bind(order_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
                if let Some((sku, qty)) = released {
                    sqlx::query("UPDATE shop_stock SET available = available + ? WHERE sku = ?")
                        .bind(qty)
                        .bind(sku)
                        .execute(&mut *tx)
                        .await
                        .map_err(db)?;
                }
                effect(&mut tx, INVENTORY, env, order_id, "cancelled").await?;
                InventoryResult::Applied
            }
            other => return Err(bad(format!("inventory does not handle {other}"))),
        };
        sqlx::query("INSERT INTO shop_versions (order_id, version) VALUES (?, ?) ON CONFLICT (order_id) DO UPDATE SET version = excluded.version")
            .bind(order_id)
            .bind(env.aggregate.version as i64)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(result)
    }

    async fn apply_rejection(&self, env: &Envelope) -> Result<InventoryResult> {
        let order_id = env.data["order_id"]
            .as_str()
            .ok_or_else(|| bad("rejection without order_id"))?;
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, ORDERS, env.id).await? {
            rollback(tx).await?;
            return Ok(InventoryResult::Duplicate);
        }
        sqlx::query("UPDATE shop_orders SET status = 'rejected' WHERE id = ?")
            .bind(order_id)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        effect(&mut tx, ORDERS, env, order_id, "rejection_applied").await?;
        tx.commit().await.map_err(db)?;
        Ok(InventoryResult::Applied)
    }

    async fn arm_crash(&self, order_id: &str) -> Result<bool> {
        let r = sqlx::query("INSERT OR IGNORE INTO shop_crash (order_id, at) VALUES (?, ?)")
            .bind(order_id)
            .bind(now())
            .execute(self.store.pool())
            .await
            .map_err(db)?;
        Ok(r.rows_affected() == 1)
    }

    async fn reservations_of(&self, order_id: &str) -> Result<u64> {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM shop_reservations WHERE order_id = ?")
                .bind(order_id)
                .fetch_one(self.store.pool())
                .await
                .map_err(db)?;
        Ok(n as u64)
    }

    async fn duplicate_seen_for(&self, order_id: &str) -> Result<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM shop_duplicates d JOIN shop_orders o ON o.created_msg = d.message_id WHERE o.id = ?",
        )
        .bind(order_id)
        .fetch_one(self.store.pool())
        .await
        .map_err(db)?;
        Ok(n > 0)
    }

    async fn published_events(&self, order_ids: &[String]) -> Result<Vec<OutgoingMessage>> {
        let mut out = Vec::new();
        for id in order_ids {
            let row: Option<(String, String, String, Vec<u8>)> = sqlx::query_as(
                "SELECT o.message_id, o.route, o.headers, o.body FROM postroom_outbox o JOIN shop_orders s ON s.created_msg = o.message_id
                 WHERE s.id = ? AND o.published_at IS NOT NULL",
            )
            .bind(id)
            .fetch_optional(self.store.pool())
            .await
            .map_err(db)?;
            if let Some((mid, route, headers, body)) = row {
                out.push(OutgoingMessage {
                    id: mid.parse().map_err(|_| bad("bad id in outbox"))?,
                    route: Route::Topic(route),
                    headers: serde_json::from_str(&headers).unwrap_or_default(),
                    body,
                });
            }
        }
        Ok(out)
    }

    async fn facts(&self, parked_ids: &[MessageId]) -> Result<ShopFacts> {
        let pool = self.store.pool();
        let mut counts = [0i64; 10];
        for (n, sql) in counts.iter_mut().zip(facts::COUNTS) {
            *n = sqlx::query_scalar(sql).fetch_one(pool).await.map_err(db)?;
        }
        let raw = facts::Raw {
            counts,
            produced: sqlx::query_scalar(facts::PRODUCED)
                .fetch_all(pool)
                .await
                .map_err(db)?,
            with_effect: sqlx::query_scalar(facts::WITH_EFFECT)
                .fetch_all(pool)
                .await
                .map_err(db)?
                .into_iter()
                .collect(),
            attempts: sqlx::query_as(facts::ATTEMPTS)
                .fetch_all(pool)
                .await
                .map_err(db)?,
        };
        Ok(facts::assemble(raw, parked_ids))
    }

    async fn count_orders_with_sku(&self, sku: &str) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shop_orders WHERE sku = ?")
            .bind(sku)
            .fetch_one(self.store.pool())
            .await
            .map_err(db)?;
        Ok(n as u64)
    }

    async fn poison_ids(&self) -> Result<Vec<String>> {
        sqlx::query_scalar("SELECT message_id FROM shop_messages WHERE kind = 'poison'")
            .fetch_all(self.store.pool())
            .await
            .map_err(db)
    }

    async fn effects_count(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shop_effects")
            .fetch_one(self.store.pool())
            .await
            .map_err(db)?;
        Ok(n as u64)
    }

    async fn produced(&self) -> Result<(u64, u64)> {
        let (o, m): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM shop_orders), (SELECT COUNT(*) FROM shop_messages)",
        )
        .fetch_one(self.store.pool())
        .await
        .map_err(db)?;
        Ok((o as u64, m as u64))
    }

    async fn in_flight(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM postroom_queue")
            .fetch_one(self.store.pool())
            .await
            .map_err(db)?;
        Ok(n as u64)
    }

    fn outbox(&self) -> Arc<dyn OutboxStore> {
        Arc::new(self.store.clone())
    }

    fn parking(&self) -> Arc<dyn ParkingStore> {
        Arc::new(self.store.clone())
    }
}
