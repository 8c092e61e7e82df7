//! Helpers shared by the CLI's broker tests.
#![allow(dead_code)]

use std::process::Command;

pub fn amqp() -> String {
    std::env::var("POSTROOM_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

pub fn pg_admin() -> String {
    std::env::var("POSTROOM_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn postroom(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run postroom")
}

pub fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "failed\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub async fn cleanup(prefix: &str) {
    let url = postroom_cli::stack::management_url(&amqp());
    let api = postroom_rabbitmq::ManagementApi::new(&url, "/").unwrap();
    let _ = api.delete_everything_named(prefix).await;
}

/// A fresh PostgreSQL database for one test, dropped by [`FreshPg::drop_db`].
pub struct FreshPg {
    admin: sqlx::PgPool,
    name: String,
    /// The database's URL.
    pub url: String,
}

impl FreshPg {
    /// Create `pr_<tag>_<random>` on the server of `POSTROOM_TEST_PG` (a missing server fails).
    pub async fn create(tag: &str) -> Self {
        let admin_url = pg_admin();
        let name = format!(
            "pr_{tag}_{}",
            &uuid::Uuid::now_v7().simple().to_string()[20..]
        );
        let admin = sqlx::PgPool::connect(&admin_url)
            .await
            .expect("PostgreSQL must be running (POSTROOM_TEST_PG)");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        let url = format!("{}/{name}", admin_url.rsplit_once('/').unwrap().0);
        Self { admin, name, url }
    }

    /// Drop the database, whoever is still connected.
    pub async fn drop_db(self) {
        let _ = sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .execute(&self.admin)
            .await;
    }
}
