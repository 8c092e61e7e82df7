//! A fresh PostgreSQL database `pr_bench_<random>`, dropped at the end.

use crate::error::{BenchError, Context};
use postroom_postgres::{PgStore, TablePrefix};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};
use std::str::FromStr;
use std::time::Duration;

/// The business table every consumer scenario updates beside its inbox row.
pub const EFFECTS_DDL: &str = "CREATE TABLE IF NOT EXISTS bench_effects (
    key TEXT PRIMARY KEY, n BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS raw_inbox (consumer TEXT NOT NULL, message_id UUID NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (consumer, message_id));";

/// The business update of one message (one counter per aggregate).
pub const EFFECT_SQL: &str = "INSERT INTO bench_effects (key, n) VALUES ($1, 1)
    ON CONFLICT (key) DO UPDATE SET n = bench_effects.n + 1";

/// A database created for this run.
#[derive(Debug)]
pub struct BenchDb {
    /// Its name.
    pub name: String,
    /// A URL that connects to it.
    pub url: String,
    admin: String,
    dropped: bool,
}

impl BenchDb {
    /// Create `pr_bench_<random>` on the server at `admin`.
    pub async fn create(admin: &str) -> Result<Self, BenchError> {
        let unavailable = |e: sqlx::Error| BenchError::Unavailable {
            server: "PostgreSQL",
            url: redact(admin),
            message: e.to_string(),
        };
        let mut conn = PgConnectOptions::from_str(admin)
            .map_err(|e| BenchError::Config(format!("POSTROOM_TEST_PG: {e}")))?
            .connect()
            .await
            .map_err(unavailable)?;
        let name = format!("pr_bench_{}", super::rand_suffix());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .ctx("creating the bench database")?;
        let _ = conn.close().await;
        Ok(Self {
            url: with_database(admin, &name),
            name,
            admin: admin.to_string(),
            dropped: false,
        })
    }

    /// A pool of `max` connections on it.
    pub async fn pool(&self, max: u32) -> Result<PgPool, BenchError> {
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&self.url)
            .await
            .ctx("connecting to the bench database")
    }

    /// A migrated postroom store with `max` connections, plus the bench tables.
    pub async fn store(&self, max: u32) -> Result<PgStore, BenchError> {
        let store = PgStore::from_pool(self.pool(max).await?, TablePrefix::default());
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

    /// Drop the database.
    pub async fn drop_now(mut self) -> Result<(), BenchError> {
        self.dropped = true;
        drop_database(&self.admin, &self.name).await
    }
}

async fn drop_database(admin: &str, name: &str) -> Result<(), BenchError> {
    let mut c = PgConnectOptions::from_str(admin)
        .map_err(|e| BenchError::Config(format!("POSTROOM_TEST_PG: {e}")))?
        .connect()
        .await
        .ctx("connecting to drop the bench database")?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut c)
        .await
        .ctx("dropping the bench database")?;
    Ok(())
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // A runtime of its own on a thread of its own: this may run inside another runtime.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                let _ = rt.block_on(drop_database(&admin, &name));
            }
        })
        .join();
    }
}

/// `url` with its database replaced by `db`.
#[must_use]
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.rsplit_once('/') {
        Some((head, _)) if head.find("//").is_some_and(|i| head.len() > i + 2) => head,
        _ => base,
    };
    query.map_or_else(|| format!("{base}/{db}"), |q| format!("{base}/{db}?{q}"))
}

/// The URL without its password.
#[must_use]
pub fn redact(url: &str) -> String {
    postroom_rabbitmq::connection::redact(url)
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn urls() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h/postgres?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u@h:5432", "x"),
            "postgres://u@h:5432/x"
        );
    }
}
