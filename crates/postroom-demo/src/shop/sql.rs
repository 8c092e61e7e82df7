//! [`ShopDb`] written once over sqlx, for every store whose SQL dialect runs it: the same
//! schema and statements on SQLite and PostgreSQL (`$n` parameters, `ON CONFLICT`,
//! `RETURNING`), with the few statements that differ in a [`Dialect`] and the store's own
//! transaction, commit, inbox claim and outbox write behind [`SqlStore`].

use super::{INVENTORY, InventoryResult, NewOrder, ORDERS, STOCK, ShopDb, ShopFacts, facts};
use postroom_core::ordering::{VersionDecision, check_version};
use postroom_core::{
    Envelope, Error, ErrorKind, MessageId, OutgoingMessage, Result, Route, async_trait,
};
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Transaction, Type,
};

/// The business tables, the same on every store. `shop_reservations` has no unique key on
/// `order_id` on purpose: a double effect would show.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS shop_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_orders (id TEXT PRIMARY KEY, sku TEXT NOT NULL, qty BIGINT NOT NULL,
    status TEXT NOT NULL DEFAULT 'created', created_msg TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_stock (sku TEXT PRIMARY KEY, available BIGINT NOT NULL, initial BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_reservations (order_id TEXT NOT NULL, sku TEXT NOT NULL,
    qty BIGINT NOT NULL, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_versions (order_id TEXT PRIMARY KEY, version BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_effects (consumer TEXT NOT NULL, message_id TEXT NOT NULL, order_id TEXT NOT NULL,
    version BIGINT NOT NULL, kind TEXT NOT NULL, ord_seq BIGINT NOT NULL, at BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS shop_effects_order ON shop_effects (consumer, order_id);
CREATE TABLE IF NOT EXISTS shop_messages (message_id TEXT PRIMARY KEY, order_id TEXT, version BIGINT, kind TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_faults (order_id TEXT PRIMARY KEY, fail_times BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_attempts (message_id TEXT NOT NULL, attempt BIGINT NOT NULL, at BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_duplicates (consumer TEXT NOT NULL, message_id TEXT NOT NULL, at BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_crash (order_id TEXT PRIMARY KEY, at BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_batches (size BIGINT NOT NULL, at BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS shop_deliveries (message_id TEXT NOT NULL, order_id TEXT NOT NULL,
    version BIGINT NOT NULL, seen BIGINT NOT NULL, outcome TEXT NOT NULL, at BIGINT NOT NULL);
";

/// The statements that differ between stores.
#[derive(Clone, Copy, Debug)]
pub struct Dialect {
    /// How many tables have the name `$1` (0 or 1).
    pub table_count: &'static str,
    /// Empty the business tables, and the postroom tables of a store that outlives a run.
    pub empty_tables: &'static str,
    /// Appended to a read whose row the transaction must hold (empty where a write
    /// transaction already holds the whole database).
    pub for_update: &'static str,
    /// The published outbox row of order `$1`'s `order.created`: id, route, headers (JSON
    /// text) and body.
    pub published_event: &'static str,
}

/// What a store adds for the shop: its dialect and its own transaction, commit, inbox claim
/// and outbox write (the shop's effects commit in the same transaction as these).
#[async_trait]
pub trait SqlStore: Clone + Send + Sync + 'static {
    /// The sqlx database.
    type Db: Database;
    /// The statements that differ.
    const DIALECT: Dialect;
    /// The pool.
    fn pool(&self) -> &Pool<Self::Db>;
    /// Begin a write transaction.
    async fn begin(&self) -> Result<Transaction<'static, Self::Db>>;
    /// Commit (a lost connection during commit is `CommitOutcomeUnknown`).
    async fn commit(&self, tx: Transaction<'static, Self::Db>) -> Result<()>;
    /// Claim `(consumer, id)` in the inbox; false for a duplicate.
    async fn claim(
        &self,
        conn: &mut <Self::Db as Database>::Connection,
        consumer: &str,
        id: MessageId,
    ) -> Result<bool>;
    /// Write `message` to the outbox (ordered under its aggregate key header, else its id).
    async fn enqueue(
        &self,
        conn: &mut <Self::Db as Database>::Connection,
        message: &OutgoingMessage,
    ) -> Result<()>;
    /// Map a driver error into postroom's classes.
    fn db_error(e: sqlx::Error) -> Error;
}

/// The shop on a [`SqlStore`].
#[derive(Clone, Debug)]
pub struct SqlShop<S> {
    store: S,
}

impl<S> SqlShop<S> {
    /// The shop on `store`.
    pub fn new(store: S) -> Self {
        Self { store }
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn bad(m: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidData, m)
}

fn text(env: &Envelope, field: &str) -> Result<String> {
    env.data[field]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| bad(format!("{} without {field}", env.message_type)))
}

fn version(env: &Envelope) -> i64 {
    i64::try_from(env.aggregate.version).unwrap_or(i64::MAX)
}

#[async_trait]
impl<S> ShopDb for SqlShop<S>
where
    S: SqlStore,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> <S::Db as Database>::Arguments<'q>: IntoArguments<'q, S::Db>,
    i64: Type<S::Db> + for<'q> Encode<'q, S::Db> + for<'r> Decode<'r, S::Db>,
    String: Type<S::Db> + for<'q> Encode<'q, S::Db> + for<'r> Decode<'r, S::Db>,
    Vec<u8>: Type<S::Db> + for<'r> Decode<'r, S::Db>,
    usize: ColumnIndex<<S::Db as Database>::Row>,
{
    async fn reset(&self) -> Result<()> {
        let pool = self.store.pool();
        let db = S::db_error;
        let marker: Option<String> =
            sqlx::query_scalar("SELECT value FROM shop_meta WHERE key = 'created_by'")
                .fetch_optional(pool)
                .await
                .unwrap_or(None);
        let tables: i64 = sqlx::query_scalar(S::DIALECT.table_count)
            .bind("shop_orders".to_string())
            .fetch_one(pool)
            .await
            .map_err(db)?;
        if tables > 0 && marker.is_none() {
            return Err(Error::new(
                ErrorKind::Config,
                "this database has shop_* tables that postroom's demo did not create; use another database",
            ));
        }
        sqlx::raw_sql(SCHEMA).execute(pool).await.map_err(db)?;
        sqlx::raw_sql(S::DIALECT.empty_tables)
            .execute(pool)
            .await
            .map_err(db)?;
        sqlx::query(
            "INSERT INTO shop_meta (key, value) VALUES ('created_by', 'postroom demo') ON CONFLICT (key) DO NOTHING",
        )
        .execute(pool)
        .await
        .map_err(db)?;
        for (sku, n) in STOCK {
            sqlx::query("INSERT INTO shop_stock (sku, available, initial) VALUES ($1, $2, $2)")
                .bind(sku.to_string())
                .bind(*n)
                .execute(pool)
                .await
                .map_err(db)?;
        }
        Ok(())
    }

    async fn create_orders(&self, orders: &[NewOrder], producer: &str) -> Result<Vec<MessageId>> {
        let db = S::db_error;
        let mut ids = Vec::new();
        let mut tx = self.store.begin().await?;
        for o in orders {
            let events = o.events(producer);
            sqlx::query(
                "INSERT INTO shop_orders (id, sku, qty, created_msg) VALUES ($1, $2, $3, $4)",
            )
            .bind(o.id.clone())
            .bind(o.sku.clone())
            .bind(o.qty)
            .bind(events[0].id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            if let Some(f) = o.fail_times {
                sqlx::query("INSERT INTO shop_faults (order_id, fail_times) VALUES ($1, $2)")
                    .bind(o.id.clone())
                    .bind(i64::from(f))
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
            for e in &events {
                sqlx::query(
                    "INSERT INTO shop_messages (message_id, order_id, version, kind) VALUES ($1, $2, $3, 'event')",
                )
                .bind(e.id.to_string())
                .bind(o.id.clone())
                .bind(version(e))
                .execute(&mut *tx)
                .await
                .map_err(db)?;
                let msg = OutgoingMessage::from_envelope(e, e.message_type.clone());
                self.store.enqueue(&mut tx, &msg).await?;
                ids.push(e.id);
            }
        }
        self.store.commit(tx).await?;
        Ok(ids)
    }

    async fn enqueue_poison(&self, messages: &[OutgoingMessage]) -> Result<()> {
        let mut tx = self.store.begin().await?;
        for m in messages {
            sqlx::query("INSERT INTO shop_messages (message_id, kind) VALUES ($1, 'poison')")
                .bind(m.id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(S::db_error)?;
            self.store.enqueue(&mut tx, m).await?;
        }
        self.store.commit(tx).await
    }

    async fn fault_for(&self, order_id: &str) -> Result<Option<u32>> {
        let n: Option<i64> =
            sqlx::query_scalar("SELECT fail_times FROM shop_faults WHERE order_id = $1")
                .bind(order_id.to_string())
                .fetch_optional(self.store.pool())
                .await
                .map_err(S::db_error)?;
        Ok(n.map(|n| u32::try_from(n).unwrap_or(u32::MAX)))
    }

    async fn record_attempt(&self, id: MessageId, attempt: u32) -> Result<()> {
        sqlx::query("INSERT INTO shop_attempts (message_id, attempt, at) VALUES ($1, $2, $3)")
            .bind(id.to_string())
            .bind(i64::from(attempt))
            .bind(now())
            .execute(self.store.pool())
            .await
            .map_err(S::db_error)?;
        Ok(())
    }

    async fn record_duplicate(&self, consumer: &str, id: MessageId) -> Result<()> {
        sqlx::query("INSERT INTO shop_duplicates (consumer, message_id, at) VALUES ($1, $2, $3)")
            .bind(consumer.to_string())
            .bind(id.to_string())
            .bind(now())
            .execute(self.store.pool())
            .await
            .map_err(S::db_error)?;
        Ok(())
    }

    async fn apply_inventory(&self, env: &Envelope) -> Result<InventoryResult> {
        let mut tx = self.store.begin().await?;
        let result = self.inventory_in(&mut tx, env).await?;
        self.store.commit(tx).await?;
        Ok(result)
    }

    async fn apply_inventory_batch(&self, envs: &[&Envelope]) -> Result<Vec<InventoryResult>> {
        let db = S::db_error;
        let mut tx = self.store.begin().await?;
        let mut results = Vec::with_capacity(envs.len());
        for env in envs {
            // A duplicate or a gap writes nothing, so the others of the batch go on.
            results.push(self.inventory_in(&mut tx, env).await?);
        }
        sqlx::query("INSERT INTO shop_batches (size, at) VALUES ($1, $2)")
            .bind(i64::try_from(envs.len()).unwrap_or(i64::MAX))
            .bind(now())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        self.store.commit(tx).await?;
        Ok(results)
    }

    async fn apply_rejection(&self, env: &Envelope) -> Result<InventoryResult> {
        let order_id = text(env, "order_id")?;
        let mut tx = self.store.begin().await?;
        if !self.store.claim(&mut tx, ORDERS, env.id).await? {
            tx.rollback().await.map_err(S::db_error)?;
            return Ok(InventoryResult::Duplicate);
        }
        sqlx::query("UPDATE shop_orders SET status = 'rejected' WHERE id = $1")
            .bind(order_id.clone())
            .execute(&mut *tx)
            .await
            .map_err(S::db_error)?;
        effect::<S>(&mut tx, ORDERS, env, &order_id, "rejection_applied").await?;
        self.store.commit(tx).await?;
        Ok(InventoryResult::Applied)
    }

    async fn arm_crash(&self, order_id: &str) -> Result<bool> {
        let armed: Option<String> = sqlx::query_scalar(
            "INSERT INTO shop_crash (order_id, at) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING order_id",
        )
        .bind(order_id.to_string())
        .bind(now())
        .fetch_optional(self.store.pool())
        .await
        .map_err(S::db_error)?;
        Ok(armed.is_some())
    }

    async fn reservations_of(&self, order_id: &str) -> Result<u64> {
        self.count(
            "SELECT COUNT(*) FROM shop_reservations WHERE order_id = $1",
            order_id,
        )
        .await
    }

    async fn duplicate_seen_for(&self, order_id: &str) -> Result<bool> {
        let n = self
            .count(
                "SELECT COUNT(*) FROM shop_duplicates d JOIN shop_orders o ON o.created_msg = d.message_id WHERE o.id = $1",
                order_id,
            )
            .await?;
        Ok(n > 0)
    }

    async fn published_events(&self, order_ids: &[String]) -> Result<Vec<OutgoingMessage>> {
        let mut out = Vec::new();
        for id in order_ids {
            let row: Option<(String, String, String, Vec<u8>)> =
                sqlx::query_as(S::DIALECT.published_event)
                    .bind(id.clone())
                    .fetch_optional(self.store.pool())
                    .await
                    .map_err(S::db_error)?;
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
        let db = S::db_error;
        let mut counts = [0i64; facts::COUNTS.len()];
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
        self.count("SELECT COUNT(*) FROM shop_orders WHERE sku = $1", sku)
            .await
    }

    async fn poison_ids(&self) -> Result<Vec<String>> {
        sqlx::query_scalar("SELECT message_id FROM shop_messages WHERE kind = 'poison'")
            .fetch_all(self.store.pool())
            .await
            .map_err(S::db_error)
    }

    async fn effects_count(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shop_effects")
            .fetch_one(self.store.pool())
            .await
            .map_err(S::db_error)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn produced(&self) -> Result<(u64, u64)> {
        let (o, m): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM shop_orders), (SELECT COUNT(*) FROM shop_messages)",
        )
        .fetch_one(self.store.pool())
        .await
        .map_err(S::db_error)?;
        Ok((u64::try_from(o).unwrap_or(0), u64::try_from(m).unwrap_or(0)))
    }
}

impl<S> SqlShop<S>
where
    S: SqlStore,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> <S::Db as Database>::Arguments<'q>: IntoArguments<'q, S::Db>,
    i64: Type<S::Db> + for<'q> Encode<'q, S::Db> + for<'r> Decode<'r, S::Db>,
    String: Type<S::Db> + for<'q> Encode<'q, S::Db> + for<'r> Decode<'r, S::Db>,
    usize: ColumnIndex<<S::Db as Database>::Row>,
{
    /// A `COUNT(*)` with one text parameter.
    async fn count(&self, sql: &str, param: &str) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(sql)
            .bind(param.to_string())
            .fetch_one(self.store.pool())
            .await
            .map_err(S::db_error)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Add `delta` to the available stock of `sku` (a reservation takes, a release gives
    /// back).
    async fn adjust_stock(
        conn: &mut <S::Db as Database>::Connection,
        sku: &str,
        delta: i64,
    ) -> Result<()> {
        sqlx::query("UPDATE shop_stock SET available = available + $1 WHERE sku = $2")
            .bind(delta)
            .bind(sku.to_string())
            .execute(conn)
            .await
            .map_err(S::db_error)?;
        Ok(())
    }

    /// The inventory transaction's work for one message on `tx`. A duplicate or a gap writes
    /// nothing but the duplicate's inbox row: the version is checked before the inbox claim, so
    /// a transaction holding many messages never has to take one back.
    async fn inventory_in(
        &self,
        tx: &mut <S::Db as Database>::Connection,
        env: &Envelope,
    ) -> Result<InventoryResult> {
        let db = S::db_error;
        let lock = S::DIALECT.for_update;
        let order_id = text(env, "order_id")?;
        // Serialise the aggregate: its version row is held until the commit.
        let last: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT version FROM shop_versions WHERE order_id = $1{lock}"
        ))
        .bind(order_id.clone())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        let seen = last.unwrap_or(0);
        let last = last.map(|v| u64::try_from(v).unwrap_or(0));
        match check_version(last, env.aggregate.version, 1) {
            VersionDecision::Apply => {}
            VersionDecision::AlreadyApplied => {
                self.store.claim(&mut *tx, INVENTORY, env.id).await?;
                delivery::<S>(&mut *tx, env, &order_id, seen, "duplicate").await?;
                return Ok(InventoryResult::Duplicate);
            }
            VersionDecision::Gap { .. } => {
                delivery::<S>(&mut *tx, env, &order_id, seen, "gap").await?;
                return Ok(InventoryResult::Gap { last });
            }
        }
        // Two copies of a first version both pass the check: the inbox keeps the second out
        // (its claim waits for the first's commit, then finds the row).
        if !self.store.claim(&mut *tx, INVENTORY, env.id).await? {
            delivery::<S>(&mut *tx, env, &order_id, seen, "duplicate").await?;
            return Ok(InventoryResult::Duplicate);
        }
        delivery::<S>(&mut *tx, env, &order_id, seen, "applied").await?;
        let result = match env.message_type.as_str() {
            "order.created" => {
                let sku = text(env, "sku")?;
                let qty = env.data["qty"]
                    .as_i64()
                    .ok_or_else(|| bad("order.created without qty"))?;
                let available: i64 = sqlx::query_scalar(&format!(
                    "SELECT available FROM shop_stock WHERE sku = $1{lock}"
                ))
                .bind(sku.clone())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?
                .ok_or_else(|| bad(format!("no stock record for sku {sku}")))?;
                if available < qty {
                    let rejected = env
                        .follow_up("inventory.reservation_rejected", INVENTORY)
                        .aggregate("order", &order_id, env.aggregate.version)
                        .data(serde_json::json!({"order_id": order_id, "sku": sku, "qty": qty, "available": available, "reason": "out_of_stock"}))
                        .build();
                    let msg =
                        OutgoingMessage::from_envelope(&rejected, "inventory.reservation_rejected");
                    self.store.enqueue(&mut *tx, &msg).await?;
                    effect::<S>(&mut *tx, INVENTORY, env, &order_id, "rejected").await?;
                    InventoryResult::Rejected
                } else {
                    Self::adjust_stock(&mut *tx, &sku, -qty).await?;
                    sqlx::query(
                        "INSERT INTO shop_reservations (order_id, sku, qty, status) VALUES ($1, $2, $3, 'reserved')",
                    )
                    .bind(order_id.clone())
                    .bind(sku)
                    .bind(qty)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
                    effect::<S>(&mut *tx, INVENTORY, env, &order_id, "reserved").await?;
                    InventoryResult::Applied
                }
            }
            "order.cancelled" => {
                let released: Option<(String, i64)> = sqlx::query_as(
                    "UPDATE shop_reservations SET status = 'released' WHERE order_id = $1 AND status = 'reserved' RETURNING sku, qty",
                )
                .bind(order_id.clone())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
                if let Some((sku, qty)) = released {
                    Self::adjust_stock(&mut *tx, &sku, qty).await?;
                }
                effect::<S>(&mut *tx, INVENTORY, env, &order_id, "cancelled").await?;
                InventoryResult::Applied
            }
            other => return Err(bad(format!("inventory does not handle {other}"))),
        };
        sqlx::query(
            "INSERT INTO shop_versions (order_id, version) VALUES ($1, $2) ON CONFLICT (order_id) DO UPDATE SET version = excluded.version",
        )
        .bind(order_id)
        .bind(version(env))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        Ok(result)
    }
}

/// Record a delivery to the inventory transaction as the version guard met it: the version
/// delivered, the version the order stood at (`seen`, 0 before its first) and what the guard
/// made of it (`applied`, `duplicate` or `gap`). Written in the guard's own transaction, so
/// what the transport delivered ahead of its turn is on record next to what was let through.
async fn delivery<S>(
    conn: &mut <S::Db as Database>::Connection,
    env: &Envelope,
    order_id: &str,
    seen: i64,
    outcome: &str,
) -> Result<()>
where
    S: SqlStore,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> <S::Db as Database>::Arguments<'q>: IntoArguments<'q, S::Db>,
    i64: Type<S::Db> + for<'q> Encode<'q, S::Db>,
    String: Type<S::Db> + for<'q> Encode<'q, S::Db>,
{
    sqlx::query(
        "INSERT INTO shop_deliveries (message_id, order_id, version, seen, outcome, at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(env.id.to_string())
    .bind(order_id.to_string())
    .bind(version(env))
    .bind(seen)
    .bind(outcome.to_string())
    .bind(now())
    .execute(conn)
    .await
    .map_err(S::db_error)?;
    Ok(())
}

/// Record an applied effect, numbered per consumer and order (the order it was applied in).
async fn effect<S>(
    conn: &mut <S::Db as Database>::Connection,
    consumer: &str,
    env: &Envelope,
    order_id: &str,
    kind: &str,
) -> Result<()>
where
    S: SqlStore,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> <S::Db as Database>::Arguments<'q>: IntoArguments<'q, S::Db>,
    i64: Type<S::Db> + for<'q> Encode<'q, S::Db>,
    String: Type<S::Db> + for<'q> Encode<'q, S::Db>,
{
    sqlx::query(
        "INSERT INTO shop_effects (consumer, message_id, order_id, version, kind, ord_seq, at)
         VALUES ($1, $2, $3, $4, $5, (SELECT COUNT(*) + 1 FROM shop_effects WHERE consumer = $1 AND order_id = $3), $6)",
    )
    .bind(consumer.to_string())
    .bind(env.id.to_string())
    .bind(order_id.to_string())
    .bind(version(env))
    .bind(kind.to_string())
    .bind(now())
    .execute(conn)
    .await
    .map_err(S::db_error)?;
    Ok(())
}
