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
