//! What the PostgreSQL crate's own tests share: a fresh migrated database, a handler that
//! always answers the same, envelopes, and waiting for a condition with a bound.
#![allow(dead_code)]

use postroom_core::{Envelope, Handled, Handler, HandlerError, Incoming, MessageId, async_trait};
use postroom_postgres::{PgStore, TablePrefix};
use postroom_testkit::servers::TestDb;
/// Wait until a condition holds, up to a bound, or fail naming what was awaited.
#[allow(unused_imports)]
pub use postroom_testkit::wait::until as wait_until;
use std::sync::Mutex;

/// A migrated store in a database of its own (dropped with the returned handle).
pub async fn fresh_store(connections: u32) -> (PgStore, TestDb) {
    let db = TestDb::create().await;
    let store = PgStore::from_pool(db.pool(connections).await, TablePrefix::default());
    store.migrate().await.expect("migrate");
    (store, db)
}

/// Run the statement `sql` on `on` (a pool, a connection or a transaction), failing the test
/// if it fails.
pub async fn execute<'c>(on: impl sqlx::PgExecutor<'c>, sql: &str) {
    sqlx::query(sql).execute(on).await.unwrap();
}

/// A pool of up to `connections` connections to the database at `url`.
pub async fn pool_at(url: &str, connections: u32) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(connections)
        .connect(url)
        .await
        .unwrap()
}

/// In one transaction: claim `consumer`'s inbox row for `id` and, when it was new, run the
/// statement `effect` with the id bound as its one parameter; commit. `Duplicate` when the
/// inbox already held the id.
pub async fn claim_and_apply(
    store: &PgStore,
    consumer: &str,
    id: MessageId,
    effect: &str,
) -> Result<Handled, HandlerError> {
    let mut tx = store.begin().await?;
    if !postroom_postgres::inbox::claim(&mut tx, store.prefix(), consumer, id).await? {
        postroom_postgres::commit(tx).await?;
        return Ok(Handled::Duplicate);
    }
    sqlx::query(effect)
        .bind(id.as_uuid())
        .execute(&mut *tx)
        .await
        .map_err(postroom_postgres::map_error)?;
    postroom_postgres::commit(tx).await?;
    Ok(Handled::Applied)
}

/// An `order.created` envelope.
pub fn order(id: &str, version: u64) -> Envelope {
    Envelope::builder("order.created", "tests")
        .aggregate("order", id, version)
        .data(serde_json::json!({ "order_id": id }))
        .build()
}

/// An outbox row for version `version` of order `id`, routed to the topic `orders`, with its
/// aggregate key.
pub fn outgoing(id: &str, version: u64) -> postroom_core::OutgoingMessage {
    postroom_core::OutgoingMessage::from_envelope(&order(id, version), "orders")
}

/// A handler that always returns the same result and records the ids it saw.
pub struct Always {
    result: Result<Handled, HandlerError>,
    /// Ids handled, in order.
    pub seen: Mutex<Vec<MessageId>>,
}

impl Always {
    /// Always fail permanently.
    pub fn permanent() -> Self {
        Self::new(Err(HandlerError::permanent("rejected", "always rejected")))
    }

    /// Always apply.
    pub fn applied() -> Self {
        Self::new(Ok(Handled::Applied))
    }

    /// Always `result`.
    pub fn new(result: Result<Handled, HandlerError>) -> Self {
        Self {
            result,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// How many times `id` was handled.
    pub fn count(&self, id: MessageId) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|i| **i == id)
            .count()
    }
}

#[async_trait]
impl Handler for Always {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        self.seen.lock().unwrap().push(m.envelope.id);
        self.result.clone()
    }
}

/// End the server process `pid` (through a connection of `pool`, which must not be that
/// process's) and wait until it is gone: `pg_terminate_backend` only signals it.
pub async fn terminate(pool: &sqlx::PgPool, pid: i32) {
    let ok: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(ok, "pg_terminate_backend({pid}) refused");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let alive: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_one(pool)
            .await
            .unwrap();
        if alive == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "backend {pid} still alive 20 s after pg_terminate_backend"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
