//! Versioned schema migrations, applied in order on open and recorded in `postroom_migrations`.

use crate::error::SqlxResultExt;
use postroom_core::Result;
use sqlx::SqlitePool;

/// Migrations in order: (version, name, SQL).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "initial", include_str!("../migrations/0001_initial.sql")),
    (
        2,
        "outbox_pending_seq",
        include_str!("../migrations/0002_outbox_pending_seq.sql"),
    ),
    (
        3,
        "redrive_outcome",
        include_str!("../migrations/0003_redrive_outcome.sql"),
    ),
    (4, "console", include_str!("../migrations/0004_console.sql")),
    (
        5,
        "last_errors",
        include_str!("../migrations/0005_last_errors.sql"),
    ),
    (
        6,
        "outbox_not_before",
        include_str!("../migrations/0006_outbox_not_before.sql"),
    ),
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Apply every migration not yet applied. Safe to run from several processes at once.
pub async fn migrate(pool: &SqlitePool) -> Result<()> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.db()?;
    sqlx::query("CREATE TABLE IF NOT EXISTS postroom_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)")
        .execute(&mut *tx)
        .await
        .db()?;
    let current: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM postroom_migrations")
        .fetch_one(&mut *tx)
        .await
        .db()?;
    let current = current.unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(postroom_core::Error::new(
            postroom_core::ErrorKind::Config,
            format!(
                "database schema version {current} is newer than this postroom build knows ({SCHEMA_VERSION}); upgrade postroom"
            ),
        ));
    }
    for (version, name, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > current) {
        sqlx::raw_sql(sql).execute(&mut *tx).await.db()?;
        sqlx::query("INSERT INTO postroom_migrations (version, name, applied_at) VALUES (?, ?, ?)")
            .bind(version)
            .bind(name)
            .bind(crate::time::now_ms())
            .execute(&mut *tx)
            .await
            .db()?;
    }
    tx.commit().await.db()
}
