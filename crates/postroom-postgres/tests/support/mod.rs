//! A fresh PostgreSQL database per test: `CREATE DATABASE pr_<random>` on the server named by
//! `POSTROOM_TEST_PG` (default `postgres://postgres@127.0.0.1:5432/postgres`), dropped again
//! when the handle goes. A missing server fails the test: it is never skipped.

#![allow(dead_code)]

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};
use std::str::FromStr;

/// The admin URL of the test server.
pub fn server_url() -> String {
    std::env::var("POSTROOM_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// `url` with its database replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.rsplit_once('/') {
        Some((head, _)) if head.contains("//") && head.len() > head.find("//").unwrap_or(0) + 2 => {
            head
        }
        _ => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// A database created for one test.
pub struct TestDb {
    /// Its name.
    pub name: String,
    /// A URL that connects to it.
    pub url: String,
}

impl TestDb {
    /// Create a new, empty database. Panics (fails the test) when the server is unreachable.
    pub async fn create() -> Self {
        let admin = server_url();
        let name = format!("pr_{}", &uuid::Uuid::now_v7().simple().to_string()[16..]);
        let mut conn = PgConnectOptions::from_str(&admin)
            .expect("POSTROOM_TEST_PG is a valid URL")
            .connect()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "PostgreSQL is required for these tests and is not reachable at {admin}: {e}"
                )
            });
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let _ = conn.close().await;
        Self {
            url: with_database(&admin, &name),
            name,
        }
    }

    /// A pool on this database.
    pub async fn pool(&self, max: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(std::time::Duration::from_secs(20))
            .connect(&self.url)
            .await
            .expect("connect to the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (server_url(), self.name.clone());
        // Drop it from a thread of its own: this may run inside (or after) the test's runtime.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok(mut c) = PgConnectOptions::from_str(&admin)
                    .expect("url")
                    .connect()
                    .await
                {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut c)
                        .await;
                }
            });
        });
        let _ = done.join();
    }
}

#[test]
fn urls() {
    assert_eq!(
        with_database("postgres://u@h:5432/postgres", "x"),
        "postgres://u@h:5432/x"
    );
    assert_eq!(
        with_database("postgres://u@h:5432/postgres?sslmode=disable", "x"),
        "postgres://u@h:5432/x?sslmode=disable"
    );
    assert_eq!(
        with_database("postgres://u@h:5432", "x"),
        "postgres://u@h:5432/x"
    );
}
