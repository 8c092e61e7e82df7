//! A small migrator for a configurable table prefix: versioned SQL files embedded at build
//! time, `{prefix}` substituted, applied in order in one transaction under an advisory lock,
//! and recorded (with a checksum) in `{prefix}schema_migrations`.

use crate::error::{SqlxResultExt, commit};
use crate::schema::TablePrefix;
use postroom_core::{Error, ErrorKind, Result};
use sqlx::{PgPool, Row};

/// One versioned migration.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// Version (the `NNNN` of `NNNN_name.sql`).
    pub version: i32,
    /// Name (the `name` of `NNNN_name.sql`).
    pub name: &'static str,
    /// SQL text with `{prefix}` placeholders.
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "outbox",
        sql: include_str!("../migrations/0001_outbox.sql"),
    },
    Migration {
        version: 2,
        name: "inbox",
        sql: include_str!("../migrations/0002_inbox.sql"),
    },
    Migration {
        version: 3,
        name: "parking",
        sql: include_str!("../migrations/0003_parking.sql"),
    },
    Migration {
        version: 4,
        name: "queue",
        sql: include_str!("../migrations/0004_queue.sql"),
    },
    Migration {
        version: 5,
        name: "inbox_queue",
        sql: include_str!("../migrations/0005_inbox_queue.sql"),
    },
    Migration {
        version: 6,
        name: "outbox_fillfactor",
        sql: include_str!("../migrations/0006_outbox_fillfactor.sql"),
    },
    Migration {
        version: 7,
        name: "outbox_notify_schema",
        sql: include_str!("../migrations/0007_outbox_notify_schema.sql"),
    },
    Migration {
        version: 8,
        name: "redrive_outcome",
        sql: include_str!("../migrations/0008_redrive_outcome.sql"),
    },
    Migration {
        version: 9,
        name: "console",
        sql: include_str!("../migrations/0009_console.sql"),
    },
    Migration {
        version: 10,
        name: "last_errors",
        sql: include_str!("../migrations/0010_last_errors.sql"),
    },
    Migration {
        version: 11,
        name: "outbox_quiet_insert",
        sql: include_str!("../migrations/0011_outbox_quiet_insert.sql"),
    },
    Migration {
        version: 12,
        name: "wal_position",
        sql: include_str!("../migrations/0012_wal_position.sql"),
    },
    Migration {
        version: 13,
        name: "outbox_not_before",
        sql: include_str!("../migrations/0013_outbox_not_before.sql"),
    },
];

/// The latest schema version this crate knows.
#[must_use]
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// FNV-1a, 64 bits: stable across builds and platforms (unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

/// Apply every pending migration for `prefix`. Safe to call from many processes at once:
/// they queue on a transaction-scoped advisory lock and the later ones find nothing to do.
/// Returns the versions applied by this call. A migration already applied whose text has
/// changed since is refused ([`ErrorKind::Config`]).
pub async fn migrate(pool: &PgPool, prefix: &TablePrefix) -> Result<Vec<i32>> {
    let mut tx = pool.begin().await.pg()?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(fnv1a(format!("postroom-migrate:{prefix}").as_bytes()))
        .execute(&mut *tx)
        .await
        .pg()?;
    let table = prefix.table("schema_migrations");
    sqlx::raw_sql(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (
            version    INTEGER     PRIMARY KEY,
            name       TEXT        NOT NULL,
            checksum   BIGINT      NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )"
    ))
    .execute(&mut *tx)
    .await
    .pg()?;
    let applied: Vec<(i32, i64)> = sqlx::query(&format!(
        "SELECT version, checksum FROM {table} ORDER BY version"
    ))
    .fetch_all(&mut *tx)
    .await
    .pg()?
    .into_iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    if let Some((v, _)) = applied.iter().find(|(v, _)| *v > latest_version()) {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "{table} is at version {v}, newer than this build knows ({})",
                latest_version()
            ),
        ));
    }
    let mut done = Vec::new();
    for m in MIGRATIONS {
        let checksum = fnv1a(m.sql.as_bytes());
        if let Some((_, recorded)) = applied.iter().find(|(v, _)| *v == m.version) {
            if *recorded != checksum {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "migration {:04}_{} changed after it was applied",
                        m.version, m.name
                    ),
                ));
            }
            continue;
        }
        sqlx::raw_sql(&prefix.apply(m.sql))
            .execute(&mut *tx)
            .await
            .pg()?;
        sqlx::query(&format!(
            "INSERT INTO {table} (version, name, checksum) VALUES ($1, $2, $3)"
        ))
        .bind(m.version)
        .bind(m.name)
        .bind(checksum)
        .execute(&mut *tx)
        .await
        .pg()?;
        tracing::info!(version = m.version, name = m.name, %prefix, "migration applied");
        done.push(m.version);
    }
    commit(tx).await?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_increasing_and_use_the_prefix() {
        for pair in MIGRATIONS.windows(2) {
            assert!(
                pair[0].version < pair[1].version,
                "{} before {}",
                pair[0].name,
                pair[1].name
            );
        }
        for m in MIGRATIONS {
            assert!(m.sql.contains("{prefix}"), "{} uses the prefix", m.name);
        }
    }
}
