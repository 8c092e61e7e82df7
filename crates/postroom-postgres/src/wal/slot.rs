//! The WAL relay's setup on the server: logical decoding on, a publication of the outbox
//! table's inserts, a logical replication slot with the `pgoutput` plugin, and its position
//! row. What postroom has the rights to create it creates; what it cannot, it explains
//! (with the managed services' names for the same settings).

use super::lsn::Lsn;
use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::{Error, ErrorKind, Result};
use sqlx::{PgPool, Row};

/// How to get logical decoding where it is off.
const WAL_LEVEL_HELP: &str = "set wal_level = logical and restart PostgreSQL (ALTER SYSTEM SET \
    wal_level = logical; Amazon RDS and Aurora: rds.logical_replication = 1 in the parameter \
    group; Google Cloud SQL: the cloudsql.logical_decoding flag; Azure: wal_level = LOGICAL in \
    the server parameters)";

/// How to give a role the right to read a slot.
fn replication_help(user: &str) -> String {
    format!(
        "the role {user:?} needs the REPLICATION attribute: a superuser runs ALTER ROLE \"{user}\" \
         REPLICATION (Amazon RDS and Aurora: GRANT rds_replication TO \"{user}\"; Google Cloud \
         SQL: ALTER ROLE \"{user}\" WITH REPLICATION as cloudsqlsuperuser)"
    )
}

/// The way back from a lost slot.
pub(crate) const RECOVER_HELP: &str = "recreate the slot and republish the outbox rows it had \
    not passed (WalRelay::recreate_slot, or `postroom relay --from wal --recreate-slot`); the \
    consumers' inbox absorbs what was already published";

/// A replication slot as `pg_replication_slots` shows it.
#[derive(Clone, Debug)]
pub(crate) struct SlotRow {
    plugin: Option<String>,
    database: Option<String>,
    wal_status: Option<String>,
    /// The position the slot's reader confirmed.
    pub confirmed: Option<Lsn>,
}

impl SlotRow {
    /// Whether the server removed log the slot needed (`wal_status = 'lost'`).
    pub(crate) fn lost(&self) -> bool {
        self.wal_status.as_deref() == Some("lost")
    }
}

/// The slot `name`, if it exists.
pub(crate) async fn find(pool: &PgPool, name: &str) -> Result<Option<SlotRow>> {
    let row = sqlx::query(
        "SELECT plugin::text, database::text, wal_status, confirmed_flush_lsn::text AS confirmed
         FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
    .pg()?;
    let Some(row) = row else { return Ok(None) };
    let confirmed: Option<String> = row.try_get("confirmed").pg()?;
    Ok(Some(SlotRow {
        plugin: row.try_get("plugin").pg()?,
        database: row.try_get("database").pg()?,
        wal_status: row.try_get("wal_status").pg()?,
        confirmed: confirmed.and_then(|c| c.parse().ok()),
    }))
}

/// What the relay needs to know once its setup is done.
#[derive(Clone, Debug)]
pub(crate) struct Prepared {
    /// The schema the outbox lives in.
    pub schema: String,
}

/// Check and create what the relay of `slot` over `prefix`'s outbox needs (see the module
/// documentation). A slot that is missing although its position row says it was made, or
/// that the server invalidated, is an error with the way back.
pub(crate) async fn prepare(
    pool: &PgPool,
    prefix: &TablePrefix,
    slot: &str,
    publication: &str,
) -> Result<Prepared> {
    let level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(pool)
        .await
        .pg()?;
    if level != "logical" {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the WAL relay needs logical decoding, and wal_level is {level:?}: {WAL_LEVEL_HELP}"
            ),
        ));
    }
    let (schema, user, database): (String, String, String) =
        sqlx::query_as("SELECT current_schema(), current_user::text, current_database()::text")
            .fetch_one(pool)
            .await
            .pg()?;
    ensure_publication(pool, prefix, &schema, publication).await?;
    match find(pool, slot).await? {
        Some(s) if s.lost() => Err(Error::new(
            ErrorKind::Config,
            format!(
                "the replication slot {slot:?} was invalidated: the server removed log it still needed (max_slot_wal_keep_size), so messages committed since {} may not have been published; {RECOVER_HELP}",
                s.confirmed
                    .map_or("its last position".into(), |l| l.to_string())
            ),
        )),
        Some(s) if s.plugin.as_deref() != Some("pgoutput") => Err(Error::new(
            ErrorKind::Config,
            format!(
                "the replication slot {slot:?} uses the plugin {:?}, not pgoutput: name another slot for the relay",
                s.plugin.unwrap_or_default()
            ),
        )),
        Some(s) if s.database.as_deref() != Some(database.as_str()) => Err(Error::new(
            ErrorKind::Config,
            format!(
                "the replication slot {slot:?} belongs to database {:?}, not {database:?}: name another slot for the relay",
                s.database.unwrap_or_default()
            ),
        )),
        Some(_) => Ok(Prepared { schema }),
        None => {
            if let Some(lsn) = position_of(pool, prefix, slot).await? {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "the replication slot {slot:?} was dropped (it stood at {lsn}): messages committed since may not have been published; {RECOVER_HELP}"
                    ),
                ));
            }
            create_slot(pool, prefix, slot, &user).await?;
            Ok(Prepared { schema })
        }
    }
}

/// Create the publication of the outbox's inserts, unless it exists.
async fn ensure_publication(
    pool: &PgPool,
    prefix: &TablePrefix,
    schema: &str,
    publication: &str,
) -> Result<()> {
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)")
            .bind(publication)
            .fetch_one(pool)
            .await
            .pg()?;
    if exists {
        return Ok(());
    }
    let sql = format!(
        "CREATE PUBLICATION \"{publication}\" FOR TABLE \"{schema}\".{prefix}outbox WITH (publish = 'insert')"
    );
    match sqlx::query(&sql).execute(pool).await {
        Ok(_) => Ok(()),
        // Another relay created it at the same moment.
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42710") => Ok(()),
        Err(e) => Err(Error::new(
            ErrorKind::Config,
            format!(
                "creating the publication {publication:?} failed ({e}); the outbox table's owner (or a superuser) runs: {sql}"
            ),
        )),
    }
}

/// Create the slot and its position row.
async fn create_slot(pool: &PgPool, prefix: &TablePrefix, slot: &str, user: &str) -> Result<()> {
    let created = sqlx::query_scalar::<_, String>(
        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
    )
    .bind(slot)
    .fetch_one(pool)
    .await;
    let lsn = match created {
        Ok(lsn) => lsn,
        // Another relay created it at the same moment.
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42710") => {
            return Ok(());
        }
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42501") => {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "creating the replication slot {slot:?} was refused: {}",
                    replication_help(user)
                ),
            ));
        }
        Err(e) => return Err(crate::error::map(e)),
    };
    write_position(pool, prefix, slot, &lsn, None).await
}

/// The position row's confirmed position of `slot`, if it has one.
pub(crate) async fn position_of(
    pool: &PgPool,
    prefix: &TablePrefix,
    slot: &str,
) -> Result<Option<String>> {
    sqlx::query_scalar(&format!(
        "SELECT confirmed_lsn::text FROM {prefix}wal_position WHERE slot = $1"
    ))
    .bind(slot)
    .fetch_optional(pool)
    .await
    .pg()
}

/// Record where `slot` stands: its confirmed position `lsn` and, when known, the sequence
/// number up to which every outbox row it passed is published.
pub(crate) async fn write_position(
    pool: &PgPool,
    prefix: &TablePrefix,
    slot: &str,
    lsn: &str,
    published_seq: Option<i64>,
) -> Result<()> {
    sqlx::query(&format!(
        "INSERT INTO {prefix}wal_position (slot, confirmed_lsn, published_seq)
         VALUES ($1, $2::pg_lsn, coalesce($3, 0))
         ON CONFLICT (slot) DO UPDATE SET confirmed_lsn = greatest({prefix}wal_position.confirmed_lsn, excluded.confirmed_lsn),
             published_seq = greatest({prefix}wal_position.published_seq, coalesce($3, {prefix}wal_position.published_seq)),
             updated_at = now()"
    ))
    .bind(slot)
    .bind(lsn)
    .bind(published_seq)
    .execute(pool)
    .await
    .pg()?;
    Ok(())
}

/// The role's right to read a slot, said as a configuration error (the server refused a
/// replication connection with SQLSTATE 42501).
pub(crate) fn refused_replication(user: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!(
            "the server refused a replication connection: {}",
            replication_help(user)
        ),
    )
}
