//! The probe's effect: claim the inbox row and count an effect in one SQLite transaction.

use super::Probe;
use postroom_core::{Handled, HandlerError, Incoming};
use postroom_sqlite::{SqliteStore, inbox, map_error};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// An SQLite file with the inbox and an effects table.
pub async fn store_at(path: &Path) -> SqliteStore {
    let store = SqliteStore::open(path).await.expect("open sqlite");
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS effects (message_id TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL)",
    )
    .execute(store.pool())
    .await
    .expect("effects table");
    store
}

/// Where a probe applies its effect: `consumer`'s inbox and the effects table of `store`.
pub(super) struct SqliteInbox {
    store: SqliteStore,
    consumer: String,
}

impl SqliteInbox {
    /// Claim the message for the consumer and count its effect, or report a duplicate.
    pub(super) async fn apply(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let e = &m.envelope;
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, &self.consumer, e.id).await? {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO effects (message_id, key, version) VALUES (?, ?, ?)")
            .bind(e.id.to_string())
            .bind(&e.aggregate.id)
            .bind(i64::try_from(e.aggregate.version).unwrap())
            .execute(&mut *tx)
            .await
            .map_err(|x| HandlerError::from(map_error(x)))?;
        tx.commit()
            .await
            .map_err(|x| HandlerError::from(map_error(x)))?;
        Ok(Handled::Applied)
    }
}

impl Probe {
    /// A probe whose success claims the inbox row of `consumer` and counts an effect in one
    /// transaction on `store` (made by [`store_at`]).
    pub fn with_inbox(store: SqliteStore, consumer: &str, mode: super::Mode) -> Arc<Self> {
        Arc::new(Self {
            mode: Mutex::new(mode),
            calls: Mutex::new(Vec::new()),
            inbox: Some(SqliteInbox {
                store,
                consumer: consumer.into(),
            }),
        })
    }

    /// Effects committed for aggregate id `key`.
    pub async fn effects(&self, key: &str) -> i64 {
        let inbox = self.inbox.as_ref().expect("a probe made with an inbox");
        sqlx::query_scalar("SELECT COUNT(*) FROM effects WHERE key = ?")
            .bind(key)
            .fetch_one(inbox.store.pool())
            .await
            .unwrap()
    }
}
