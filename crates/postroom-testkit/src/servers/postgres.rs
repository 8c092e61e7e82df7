//! A fresh PostgreSQL database per test: `CREATE DATABASE pr_<random>` on the server named by
//! `POSTROOM_TEST_PG` (default `postgres://postgres@127.0.0.1:5432/postgres`), dropped again
//! when the handle goes. A missing server fails the test: it is never skipped. The one place
//! that makes fresh databases: the stores' tests, the CLI's tests and the bench use it.

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

/// A database created for one test (or one bench run), dropped (with `FORCE`) when the
/// handle goes.
pub struct TestDb {
    /// Its name.
    pub name: String,
    /// A URL that connects to it.
    pub url: String,
    admin: String,
}

// Not derived: the URLs may hold the server's password.
postroom_core::debug_showing!(TestDb { name });

impl TestDb {
    /// Create a new, empty database on the test server. Panics (fails the test) when the
    /// server is unreachable.
    pub async fn create() -> Self {
        let admin = server_url();
        Self::create_on(&admin, "pr").await.unwrap_or_else(|e| {
            panic!("PostgreSQL is required for these tests and is not reachable: {e}")
        })
    }

    /// Create `<tag>_<random>` on the server at `admin` (an admin connection URL); an error
    /// instead of a panic, for programs that report it (the bench).
    pub async fn create_on(admin: &str, tag: &str) -> Result<Self, sqlx::Error> {
        let name = format!("{tag}_{}", &uuid::Uuid::now_v7().simple().to_string()[16..]);
        let mut conn = PgConnectOptions::from_str(admin)?.connect().await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        let _ = conn.close().await;
        Ok(Self {
            url: with_database(admin, &name),
            name,
            admin: admin.to_string(),
        })
    }

    /// A connection to the server's admin database (to create roles, change owners).
    pub async fn admin(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(1)
            .connect(&self.admin)
            .await
            .expect("connect to the test server")
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
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Drop it from a thread of its own: this may run inside (or after) the test's runtime.
        super::clean_up(async move {
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
    }
}

#[cfg(test)]
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
