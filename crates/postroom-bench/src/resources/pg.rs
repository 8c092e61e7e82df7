//! The run's PostgreSQL database: a fresh one made by the test-support crate's
//! [`TestDb`] (the one place that makes throwaway databases
//! on the test servers; dropped when the run ends), with postroom's tables and the bench's.

use crate::error::{BenchError, Context};
use postroom_postgres::{PgOptions, PgStore};
use postroom_testkit::servers::TestDb;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use std::time::Duration;

/// The business table every consumer scenario updates beside its inbox row.
pub const EFFECTS_DDL: &str = "CREATE TABLE IF NOT EXISTS bench_effects (
    key TEXT PRIMARY KEY, n BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS raw_inbox (consumer TEXT NOT NULL, message_id UUID NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (consumer, message_id));";

/// The business update of one message (one counter per aggregate).
pub const EFFECT_SQL: &str = "INSERT INTO bench_effects (key, n) VALUES ($1, 1)
    ON CONFLICT (key) DO UPDATE SET n = bench_effects.n + 1";

/// Add `counts` (aggregate id → messages) to the business counters in one statement: one
/// row per key (a statement may not update a row twice), in key order (no deadlocks between
/// transactions in flight). Nothing to do when `counts` is empty.
pub async fn add_effects<K: AsRef<str>>(
    tx: &mut sqlx::PgConnection,
    counts: std::collections::BTreeMap<K, i64>,
) -> Result<(), sqlx::Error> {
    if counts.is_empty() {
        return Ok(());
    }
    let (keys, ns): (Vec<&str>, Vec<i64>) = counts.iter().map(|(k, n)| (k.as_ref(), *n)).unzip();
    sqlx::query(
        "INSERT INTO bench_effects (key, n) SELECT * FROM unnest($1::text[], $2::bigint[])
         ON CONFLICT (key) DO UPDATE SET n = bench_effects.n + EXCLUDED.n",
    )
    .bind(&keys)
    .bind(&ns)
    .execute(tx)
    .await
    .map(|_| ())
}

/// A database created for this run, dropped with the handle.
#[derive(Debug)]
pub struct BenchDb {
    db: TestDb,
}

impl BenchDb {
    /// Create `pr_bench_<random>` on the server at `admin`.
    pub async fn create(admin: &str) -> Result<Self, BenchError> {
        let db =
            TestDb::create_on(admin, "pr_bench")
                .await
                .map_err(|e| BenchError::Unavailable {
                    server: "PostgreSQL",
                    url: postroom_ops::redact(admin),
                    message: e.to_string(),
                })?;
        Ok(Self { db })
    }

    /// A URL that connects to it.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.db.url
    }

    /// A pool of `max` connections on it, with sqlx's defaults: what the raw baselines use.
    pub async fn pool(&self, max: u32) -> Result<PgPool, BenchError> {
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(30))
            .connect(self.url())
            .await
            .ctx("connecting to the bench database")
    }

    /// A migrated postroom store with `max` connections (the pool `PgStore::connect_with`
    /// builds), plus the bench tables.
    pub async fn store(&self, max: u32) -> Result<PgStore, BenchError> {
        let options = PgOptions {
            max_connections: max,
            acquire_timeout: Duration::from_secs(30),
            ..PgOptions::default()
        };
        let store = PgStore::connect_with(self.url(), options)
            .await
            .ctx("connecting to the bench database")?;
        store.migrate().await.ctx("migrating postroom tables")?;
        sqlx::raw_sql(EFFECTS_DDL)
            .execute(store.pool())
            .await
            .ctx("creating bench tables")?;
        Ok(store)
    }

    /// The server's durability settings (to print beside PostgreSQL figures).
    pub async fn settings(&self) -> Result<String, BenchError> {
        let pool = self.pool(1).await?;
        let mut out = Vec::new();
        for s in [
            "server_version",
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "shared_buffers",
        ] {
            let v: String = sqlx::query_scalar(&format!("SHOW {s}"))
                .fetch_one(&pool)
                .await
                .ctx("reading server settings")?;
            out.push(format!("{s}={v}"));
        }
        pool.close().await;
        Ok(out.join(" "))
    }
}
