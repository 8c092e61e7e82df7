//! A PostgreSQL database for fault tests that cut the path to it: the inbox and a plain
//! effects table, reached through a loopback port; and the handler that applies into it.

use crate::servers::TestDb;
use async_trait::async_trait;
use postroom_core::consumer::ConsumerConfig;
use postroom_core::{EnvelopeDecoder, Handled, Handler, HandlerError, Incoming, RetryPolicy};
use postroom_postgres::{TablePrefix, commit, inbox};
use sqlx::postgres::PgConnectOptions;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The settings of the `inventory` consumer that fault tests run against this database:
/// `order.created` version 1, one delivery per stage of `ladder` then the parking lot (no
/// jitter, no age limit), no circuit breaker, one message at a time.
#[must_use]
pub fn inventory_config(ladder: &str) -> ConsumerConfig {
    let mut cfg = ConsumerConfig::new(
        "inventory",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.retry = RetryPolicy {
        max_age: None,
        jitter: 0.0,
        ..RetryPolicy::with_ladder(ladder.parse().expect("a retry ladder"))
    };
    cfg.breaker.failure_threshold = 0;
    cfg.concurrency = 1;
    cfg
}

/// A fresh database (dropped on drop) with the inbox under the default table prefix and an
/// `effects (message_id, key)` table, for a handler that reaches it through a
/// [`CuttablePath`](crate::servers::CuttablePath).
pub struct PgEffectsDb {
    db: TestDb,
    /// The inbox's table prefix.
    pub prefix: TablePrefix,
}

impl PgEffectsDb {
    /// A new database, migrated, with the effects table.
    pub async fn fresh() -> Self {
        let db = TestDb::create().await;
        let pool = db.pool(2).await;
        let prefix = TablePrefix::default();
        postroom_postgres::migrate(&pool, &prefix).await.unwrap();
        sqlx::query("CREATE TABLE effects (message_id UUID NOT NULL, key TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        Self { db, prefix }
    }

    /// Connect options for this database through the forwarder on `port`.
    pub fn via(&self, port: u16) -> PgConnectOptions {
        PgConnectOptions::from_str(&self.db.url)
            .expect("test database URL")
            .host("127.0.0.1")
            .port(port)
    }

    /// Effects committed under `key`.
    pub async fn effects(&self, key: &str) -> i64 {
        let pool = self.db.pool(1).await;
        let n = sqlx::query_scalar("SELECT COUNT(*) FROM effects WHERE key = $1")
            .bind(key)
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    }

    /// A handler that reaches this database through the loopback `port` (a
    /// [`CuttablePath`](crate::servers::CuttablePath)), waiting at most 2 s for a connection.
    pub fn handler(&self, port: u16) -> Arc<PgEffect> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy_with(self.via(port));
        Arc::new(PgEffect {
            pool,
            prefix: self.prefix.clone(),
            calls: Mutex::new(Vec::new()),
            returned: Mutex::new(Vec::new()),
        })
    }
}

/// Inbox claim + effect in one PostgreSQL transaction; every call is recorded: its attempt
/// and when it was entered, and when it returned (a retry is due no earlier than the return
/// of the failed attempt plus the stage delay).
/// The handler claims the inbox row of consumer `inventory`.
pub struct PgEffect {
    pool: sqlx::PgPool,
    prefix: TablePrefix,
    /// Each call's attempt and when it was entered.
    pub calls: Mutex<Vec<(u32, Instant)>>,
    /// When each call returned.
    pub returned: Mutex<Vec<Instant>>,
}

impl PgEffect {
    async fn apply(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| HandlerError::from(postroom_postgres::map_error(e)))?;
        if !inbox::claim(&mut tx, &self.prefix, "inventory", m.envelope.id).await? {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO effects (message_id, key) VALUES ($1, $2)")
            .bind(m.envelope.id.as_uuid())
            .bind(&m.envelope.aggregate.id)
            .execute(&mut *tx)
            .await
            .map_err(|e| HandlerError::from(postroom_postgres::map_error(e)))?;
        commit(tx).await?;
        Ok(Handled::Applied)
    }
}

#[async_trait]
impl Handler for PgEffect {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        self.calls.lock().unwrap().push((m.attempt, Instant::now()));
        let result = self.apply(m).await;
        self.returned.lock().unwrap().push(Instant::now());
        result
    }
}
