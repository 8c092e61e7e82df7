//! The inbox: `(consumer, message_id)` claimed in the same transaction as the business
//! effect, one id or a whole batch in one statement. A duplicate delivery claims nothing, so the handler commits nothing new and acks.
//!
//! Retention: [`purge`] deletes rows older than the replay window. The window must be longer
//! than the longest time a copy of a message can still arrive: the relay's lease plus its
//! retry backoff, the full retry ladder, the broker's redelivery timeout, and the longest
//! time an operator may wait before redriving from the parking lot. [`DEFAULT_REPLAY_WINDOW`]
//! is 14 days; shorten it only with those figures in hand.

use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::inbox::LOOKUP_CHUNK;
use postroom_core::{Error, ErrorKind, InboxLookup, MessageId, Result, async_trait};
use sqlx::postgres::PgArguments;
use sqlx::{Arguments, Encode, Executor, PgConnection, PgPool, Postgres, Type};
use std::time::Duration;

/// Default replay window kept by [`purge`]: 14 days.
pub const DEFAULT_REPLAY_WINDOW: Duration = Duration::from_secs(14 * 24 * 3600);

/// Claim `message_id` for `consumer` inside the handler's transaction (pass `&mut *tx`).
/// `true` when the id is new: apply the effect; `false` for a duplicate: commit nothing new.
///
/// Two concurrent deliveries of the same id: the second waits on the first's row lock and
/// then sees the conflict, so at most one of them applies the effect.
pub async fn claim(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    consumer: &str,
    message_id: MessageId,
) -> Result<bool> {
    let done = sqlx::query(&claim_sql(prefix))
        .bind(consumer)
        .bind(message_id.as_uuid())
        .execute(conn)
        .await
        .pg()?;
    Ok(done.rows_affected() == 1)
}

/// The claim of one id: `$1` the consumer, `$2` the message id.
fn claim_sql(prefix: &TablePrefix) -> String {
    format!(
        "INSERT INTO {prefix}inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING"
    )
}

/// The relation an [`apply_once`] effect reads the claim from: one row when the message is
/// new, none when it is a duplicate.
pub const CLAIM_RELATION: &str = "postroom_claim";

/// Claim `message_id` for `consumer` and apply a business effect that is one SQL statement,
/// both in a single statement: one round trip instead of four (`BEGIN`, the claim, the
/// effect, `COMMIT`), with the same guarantee: the inbox row and the effect commit together or
/// not at all, and a duplicate changes nothing. For effects such as an upsert, a counter or a
/// balance update, or an inserted row; an effect of several statements, or one that reads what
/// it needs first, uses [`claim`] in a transaction of its own.
///
/// The effect reads the claim as the relation [`CLAIM_RELATION`] (`postroom_claim`), which has
/// one row when the message is new and none for a duplicate, so it must take its rows from it:
/// `INSERT INTO … SELECT … FROM postroom_claim`, `UPDATE … FROM postroom_claim WHERE …`,
/// `DELETE FROM … USING postroom_claim WHERE …`. An effect that does not mention it is refused
/// (it would run for duplicates too). `$1` and `$2` are the claim's consumer and message id;
/// the effect's own parameters start at `$3`, bound in order with [`ApplyOnce::bind`]. The
/// effect runs in a `WITH` clause beside the claim: it sees the tables as they were when the
/// statement began (not the inbox row being inserted), and it may not change one row twice.
///
/// Run it on a pool (the statement is its own transaction) or inside the handler's transaction
/// (pass `&mut *tx`: it then commits with the rest). Two concurrent deliveries of one id: the
/// second waits for the first's inbox row and then claims nothing.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool, prefix: postroom_postgres::TablePrefix, id: postroom_core::MessageId) -> postroom_core::Result<()> {
/// let applied = postroom_postgres::inbox::apply_once(
///     &prefix,
///     "inventory",
///     id,
///     "INSERT INTO stock_moves (sku, delta) SELECT $3, $4 FROM postroom_claim",
/// )?
/// .bind("sku-42")
/// .bind(-1_i64)
/// .execute(&pool)
/// .await?;
/// // `applied` is false for a duplicate: nothing was written.
/// # Ok(()) }
/// ```
pub fn apply_once(
    prefix: &TablePrefix,
    consumer: &str,
    message_id: MessageId,
    effect: &str,
) -> Result<ApplyOnce> {
    Ok(OnceEffect::new(prefix, effect)?.apply(consumer, message_id))
}

/// An [`apply_once`] effect checked and built into its statement once (at start-up, say), to
/// apply to each message without building or checking it again.
#[derive(Clone, Debug)]
pub struct OnceEffect {
    sql: std::sync::Arc<str>,
}

impl OnceEffect {
    /// The statement of the claim beside `effect` (see [`apply_once`]); an effect that does not
    /// read [`CLAIM_RELATION`] is refused.
    pub fn new(prefix: &TablePrefix, effect: &str) -> Result<Self> {
        let effect = effect.trim().trim_end_matches(';').trim_end();
        if !effect.to_ascii_lowercase().contains(CLAIM_RELATION) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "inbox::apply_once: the effect must take its rows from {CLAIM_RELATION} (one row \
                     for a new message, none for a duplicate), or a duplicate would apply it again: {effect:?}"
                ),
            ));
        }
        let sql = format!(
            "WITH {CLAIM_RELATION} AS ({claim} RETURNING 1),
             postroom_effect AS ({effect})
             SELECT count(*) FROM {CLAIM_RELATION}",
            claim = claim_sql(prefix)
        );
        Ok(Self { sql: sql.into() })
    }

    /// The claim of `message_id` for `consumer` with this effect, its parameters to bind.
    #[must_use]
    pub fn apply(&self, consumer: &str, message_id: MessageId) -> ApplyOnce {
        ApplyOnce {
            sql: self.sql.clone(),
            args: PgArguments::default(),
            bind_error: None,
        }
        .bind(consumer)
        .bind(message_id.as_uuid())
    }
}

/// An inbox claim with its effect, ready to run: see [`apply_once`].
#[derive(Debug)]
pub struct ApplyOnce {
    sql: std::sync::Arc<str>,
    args: PgArguments,
    bind_error: Option<String>,
}

impl ApplyOnce {
    /// Bind the effect's next parameter (`$3`, then `$4`, …).
    #[must_use]
    pub fn bind<'a, T: Encode<'a, Postgres> + Type<Postgres> + 'a>(mut self, value: T) -> Self {
        if let Err(e) = self.args.add(value)
            && self.bind_error.is_none()
        {
            self.bind_error = Some(e.to_string());
        }
        self
    }

    /// Run the claim and the effect; `true` when the message was new (the effect applied),
    /// `false` for a duplicate (nothing written).
    pub async fn execute<'e, E: Executor<'e, Database = Postgres>>(
        self,
        executor: E,
    ) -> Result<bool> {
        if let Some(e) = self.bind_error {
            return Err(Error::new(
                ErrorKind::InvalidData,
                format!("inbox::apply_once: a parameter could not be encoded: {e}"),
            ));
        }
        let claimed: i64 = sqlx::query_scalar_with(&self.sql, self.args)
            .fetch_one(executor)
            .await
            .pg()?;
        Ok(claimed == 1)
    }
}

/// Claim the inbox rows of a batch inside the handler's transaction (pass `&mut *tx`), in one
/// statement; returns the ids that were new (apply those), in the order given. Repeated ids in
/// `ids` count once.
pub async fn claim_many(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    consumer: &str,
    ids: &[MessageId],
) -> Result<Vec<MessageId>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "INSERT INTO {p}inbox (consumer, message_id) SELECT $1, u FROM unnest($2::uuid[]) AS u
         ON CONFLICT DO NOTHING RETURNING message_id",
        p = prefix
    );
    let uuids: Vec<uuid::Uuid> = ids.iter().map(MessageId::as_uuid).collect();
    let new: std::collections::HashSet<uuid::Uuid> = sqlx::query_scalar(&sql)
        .bind(consumer)
        .bind(&uuids)
        .fetch_all(conn)
        .await
        .pg()?
        .into_iter()
        .collect();
    Ok(postroom_core::inbox::new_in_order(ids, |id| {
        new.contains(&id.as_uuid())
    }))
}

/// Whether `consumer` already processed `message_id` (diagnostics; use [`claim`] for
/// correctness).
pub async fn contains(
    pool: &PgPool,
    prefix: &TablePrefix,
    consumer: &str,
    message_id: MessageId,
) -> Result<bool> {
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM {p}inbox WHERE consumer = $1 AND message_id = $2)",
        p = prefix
    );
    sqlx::query_scalar(&sql)
        .bind(consumer)
        .bind(message_id.as_uuid())
        .fetch_one(pool)
        .await
        .pg()
}

/// Delete inbox rows older than `replay_window` (see the module docs for how to choose it).
/// Returns how many were deleted.
pub async fn purge(pool: &PgPool, prefix: &TablePrefix, replay_window: Duration) -> Result<u64> {
    let sql = format!(
        "DELETE FROM {p}inbox WHERE processed_at < now() - make_interval(secs => $1)",
        p = prefix
    );
    crate::error::delete_older_than(pool, &sql, replay_window).await
}

/// Whether the consumer `consumer` (an SQL expression) has applied the message `id` (another):
/// the inbox holds it, or the inbox-queue mode marked its row done (that mode's dedup record).
fn applied_sql(prefix: &TablePrefix, consumer: &str, id: &str) -> String {
    format!(
        "(EXISTS (SELECT 1 FROM {prefix}inbox i WHERE i.consumer = {consumer} AND i.message_id = {id})
          OR EXISTS (SELECT 1 FROM {prefix}inbox_queue q WHERE q.consumer = {consumer} AND q.message_id = {id} AND q.status = 'done'))"
    )
}

/// What redrive asks before it sends a parked message back: the inbox, and the rows the
/// inbox-queue mode marked done.
#[async_trait]
impl InboxLookup for crate::PgStore {
    async fn contains(&self, consumer: &str, id: MessageId) -> Result<bool> {
        let sql = format!("SELECT {}", applied_sql(self.prefix(), "$1", "$2"));
        sqlx::query_scalar(&sql)
            .bind(consumer)
            .bind(id.as_uuid())
            .fetch_one(self.pool())
            .await
            .pg()
    }

    /// The inbox's ids and those the inbox-queue mode marked done, each once.
    async fn count(&self, consumer: &str) -> Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM (SELECT message_id FROM {p}inbox WHERE consumer = $1
                                   UNION
                                   SELECT message_id FROM {p}inbox_queue WHERE consumer = $1 AND status = 'done') applied",
            p = self.prefix()
        );
        let n: i64 = sqlx::query_scalar(&sql)
            .bind(consumer)
            .fetch_one(self.pool())
            .await
            .pg()?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// One statement per [`LOOKUP_CHUNK`] pairs: the positions (from 1) of those applied.
    async fn contains_each(&self, items: &[(&str, MessageId)]) -> Result<Vec<bool>> {
        let sql = format!(
            "SELECT w.pos FROM unnest($1::text[], $2::uuid[]) WITH ORDINALITY AS w(consumer, message_id, pos)
             WHERE {}",
            applied_sql(self.prefix(), "w.consumer", "w.message_id")
        );
        let mut held = vec![false; items.len()];
        for (chunk, part) in items.chunks(LOOKUP_CHUNK).enumerate() {
            let consumers: Vec<&str> = part.iter().map(|(c, _)| *c).collect();
            let ids: Vec<uuid::Uuid> = part.iter().map(|(_, id)| id.as_uuid()).collect();
            let applied: Vec<i64> = sqlx::query_scalar(&sql)
                .bind(consumers)
                .bind(ids)
                .fetch_all(self.pool())
                .await
                .pg()?;
            for pos in applied {
                // `pos` counts from 1 within the chunk.
                let at = usize::try_from(pos - 1)
                    .ok()
                    .map(|i| chunk * LOOKUP_CHUNK + i);
                if let Some(slot) = at.and_then(|i| held.get_mut(i)) {
                    *slot = true;
                }
            }
        }
        Ok(held)
    }
}
