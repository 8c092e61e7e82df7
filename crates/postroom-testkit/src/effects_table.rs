//! The `effects` table of a test's own store, whose rows count in `n` how often an effect was
//! applied: read the same way on PostgreSQL and on SQLite.

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Type};

/// Reads of the `effects` table in `pool`.
pub struct EffectsTable<'a, DB: Database> {
    pool: &'a Pool<DB>,
}

impl<'a, DB> EffectsTable<'a, DB>
where
    DB: Database,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    i64: Type<DB> + for<'r> Decode<'r, DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// The table in `pool`.
    #[must_use]
    pub fn on(pool: &'a Pool<DB>) -> Self {
        Self { pool }
    }

    /// Effects committed under `key` for `consumer` (0 without a row), in a table keyed by
    /// consumer and key.
    pub async fn count(&self, consumer: &str, key: &str) -> sqlx::Result<u64> {
        let n: Option<i64> =
            sqlx::query_scalar("SELECT n FROM effects WHERE consumer = $1 AND key = $2")
                .bind(consumer)
                .bind(key)
                .fetch_optional(self.pool)
                .await?;
        Ok(n.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }

    /// Fail the test unless every row's effect was applied exactly once.
    pub async fn assert_each_applied_once(&self) {
        let twice: i64 = sqlx::query_scalar("SELECT count(*) FROM effects WHERE n <> 1")
            .fetch_one(self.pool)
            .await
            .expect("count the effects applied other than once");
        assert_eq!(twice, 0, "each message applied exactly once");
    }

    /// The end of a crash test: fail it unless every id of `expected` is among the `applied`
    /// ones (saying `what` was lost otherwise) and every row's effect was applied exactly
    /// once. Nothing lost, nothing doubled.
    pub async fn assert_none_lost_each_applied_once(
        &self,
        expected: &std::collections::BTreeSet<postroom_core::MessageId>,
        applied: &std::collections::BTreeSet<postroom_core::MessageId>,
        what: &str,
    ) {
        crate::cases::assert_none_lost(expected, applied, what);
        self.assert_each_applied_once().await;
    }
}
