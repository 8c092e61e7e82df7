//! The transactional outbox.
//!
//! [`enqueue`] writes the outbox row in the caller's own transaction, beside the business
//! write. [`PgOutbox`] is the relays' side: [`OutboxStore::claim`] takes rows with
//! `FOR UPDATE SKIP LOCKED` and a lease (`locked_by`, `locked_until`), at most one row per
//! aggregate per call and only the aggregate's earliest unpublished row, so version n+1 is
//! never published before n is confirmed, however many relays run.
//! [`OutboxStore::mark_and_claim`] marks a confirmed batch and, in the same statement, claims
//! the next row of each of its aggregates: a relay keeps the aggregates it publishes. Inserts
//! fire `pg_notify('{prefix}outbox')` from a statement trigger, and so does a mark that leaves
//! a new head to the other relays; [`OutboxStore::wait_for_rows`] listens for it and falls
//! back to polling.
//!
//! [`schedule`] writes a row that is not claimed before its time, and [`cancel`] removes one
//! until a relay takes it. Claims find the scheduled rows that fell due by due time (rows not
//! yet due are never scanned), and each claim tells the relays when the next one falls due, so
//! that [`OutboxStore::wait_for_rows`] sleeps no longer than until then.

mod schedule;
mod send;
pub(crate) mod wakeup;

pub use postroom_core::relay::{OutboxSender, Sent, ToSend};
pub use schedule::{cancel, schedule};
pub use send::enqueue_to_send;

use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use postroom_core::message::truncate;
use postroom_core::outbox::{MAX_RELEASE_ERROR_CHARS, route_from_parts, route_parts};
use postroom_core::{Headers, MessageId, OutboxRecord, OutboxStore, OutgoingMessage, Result};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Row};
use std::sync::Arc;
use std::time::Duration;
use wakeup::Wakeup;

/// Advisory locks that order commits per aggregate (a power of two).
pub const LOCK_SLOTS: i32 = 1024;

/// Write the outbox row for `msg` in the caller's transaction (pass `&mut *tx`).
///
/// Rows are ordered by [`OutgoingMessage::aggregate_key`] (the `x-aggregate-key` header, else
/// the id), as on SQLite: rows with the same key are published in the order they were enqueued. To make that order the commit order, the insert takes a transaction-scoped
/// advisory lock on the key, so two transactions writing the same aggregate at once commit
/// their outbox rows one after the other (they normally already do, through the business row).
/// Keys share [`LOCK_SLOTS`] locks, so that a transaction writing rows for many aggregates
/// holds a bounded number of locks (two aggregates that share a slot only wait for each other).
pub async fn enqueue(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    msg: &OutgoingMessage,
) -> Result<()> {
    let (kind, route) = route_parts(&msg.route);
    let sql = format!(
        "INSERT INTO {p}outbox (id, aggregate_key, route_kind, route, headers, body)
         SELECT $1, $2, $3, $4, $5, $6 FROM (SELECT pg_advisory_xact_lock(hashtext('{p}outbox'), hashtext($2) & {slots})) AS l",
        p = prefix,
        slots = LOCK_SLOTS - 1
    );
    sqlx::query(&sql)
        .bind(msg.id.as_uuid())
        .bind(msg.aggregate_key())
        .bind(kind)
        .bind(route)
        .bind(Json(&msg.headers))
        .bind(&msg.body)
        .execute(conn)
        .await
        .pg()?;
    Ok(())
}

/// Write many outbox rows in the caller's transaction with one statement (all under the same
/// ordering rules as [`enqueue`]; within the batch, rows keep slice order).
pub async fn enqueue_batch(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    msgs: &[OutgoingMessage],
) -> Result<()> {
    insert_batch(conn, prefix, msgs, false).await
}

/// [`enqueue_batch`]; `quiet`: the insert wakes no relay (the caller leases the rows, and
/// notifies if it leaves any to the relays), see [`send`].
async fn insert_batch(
    conn: &mut PgConnection,
    prefix: &TablePrefix,
    msgs: &[OutgoingMessage],
    quiet: bool,
) -> Result<()> {
    if msgs.is_empty() {
        return Ok(());
    }
    // The insert trigger reads the setting (a transaction-local one, reset by the leasing
    // statement): set in a CTE of the insert itself, it costs no round trip.
    let quiet_sql = if quiet {
        "set_config('postroom.outbox_quiet', current_schema() || '.' || $8, true)"
    } else {
        "''"
    };
    let aggs: Vec<String> = msgs.iter().map(OutgoingMessage::aggregate_key).collect();
    let mut keys: Vec<&str> = aggs.iter().map(String::as_str).collect();
    keys.sort_unstable();
    keys.dedup();
    let sql = format!(
        "WITH l AS (SELECT pg_advisory_xact_lock(hashtext('{p}outbox'), s)
                    FROM (SELECT DISTINCT hashtext(k) & {slots} AS s FROM unnest($7::text[]) AS k) AS slots ORDER BY s)
         INSERT INTO {p}outbox (id, aggregate_key, route_kind, route, headers, body)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bytea[])
         WHERE (SELECT count(*) FROM l) >= 0 AND {quiet_sql} IS NOT NULL",
        p = prefix,
        slots = LOCK_SLOTS - 1
    );
    let mut ids = Vec::with_capacity(msgs.len());
    let (mut kinds, mut routes, mut headers, mut bodies) = (vec![], vec![], vec![], vec![]);
    for m in msgs {
        let (kind, route) = route_parts(&m.route);
        ids.push(m.id.as_uuid());
        kinds.push(kind);
        routes.push(route);
        headers.push(Json(&m.headers));
        bodies.push(m.body.as_slice());
    }
    let mut q = sqlx::query(&sql)
        .bind(ids)
        .bind(&aggs[..])
        .bind(kinds)
        .bind(routes)
        .bind(headers)
        .bind(bodies)
        .bind(keys);
    if quiet {
        q = q.bind(prefix.outbox_channel());
    }
    q.execute(conn).await.pg()?;
    Ok(())
}

/// The relays' side of the outbox.
#[derive(Clone, Debug)]
pub struct PgOutbox {
    pool: PgPool,
    prefix: TablePrefix,
    wakeup: Arc<Wakeup>,
    sql: Arc<ClaimSql>,
}

/// The relay's statements, built once: in the claims, index 1 locks window rows before
/// probing them; `mark` marks (or deletes) confirmed rows without claiming.
#[derive(Debug)]
struct ClaimSql {
    claim: [String; 2],
    mark_and_claim: [String; 2],
    mark: String,
}

impl ClaimSql {
    fn new(prefix: &TablePrefix, delete: bool) -> Self {
        Self {
            claim: [false, true].map(|lock_first| claim_sql(prefix, lock_first)),
            mark_and_claim: [false, true]
                .map(|lock_first| mark_and_claim_sql(prefix, lock_first, delete)),
            // The successors of the marked rows are heads now: the notification wakes
            // relays that found nothing to claim. A mark that leaves no successor (a
            // producer sending its own rows, the last rows of a backlog) wakes nobody.
            mark: format!(
                "WITH u AS ({mark})
                 SELECT pg_notify(current_schema() || '.' || $2, '')
                 FROM (SELECT 1 FROM u
                       WHERE EXISTS (SELECT 1 FROM {prefix}outbox e
                                     WHERE e.aggregate_key = u.aggregate_key AND e.published_at IS NULL
                                       AND e.seq > u.seq)
                       LIMIT 1) AS left_a_head",
                mark = mark_rows(prefix, delete, "$1"),
            ),
        }
    }
}

/// The statement that takes confirmed rows (`$1`) out of the unpublished ones, returning
/// their aggregate keys and sequence numbers: a mark, or a delete (see
/// [`PgOutbox::delete_on_publish`]).
fn mark_rows(p: &TablePrefix, delete: bool, ids: &str) -> String {
    if delete {
        format!(
            "DELETE FROM {p}outbox WHERE id = ANY({ids}) AND published_at IS NULL
             RETURNING aggregate_key, seq"
        )
    } else {
        format!(
            "UPDATE {p}outbox SET published_at = now(), locked_by = NULL, locked_until = NULL
             WHERE id = ANY({ids}) AND published_at IS NULL
             RETURNING aggregate_key, seq"
        )
    }
}

impl PgOutbox {
    /// The outbox in `pool` under `prefix` (migrated beforehand with [`crate::migrate()`]).
    #[must_use]
    pub fn new(pool: PgPool, prefix: TablePrefix) -> Self {
        let wakeup = Arc::new(Wakeup::new(pool.clone(), prefix.outbox_channel()));
        let sql = Arc::new(ClaimSql::new(&prefix, false));
        Self {
            pool,
            prefix,
            wakeup,
            sql,
        }
    }

    /// Delete each row once the broker confirmed it, instead of marking it published and
    /// keeping it for the retention. A delete touches none of the outbox's indexes (a mark
    /// moves the row out of two of them and into a third), so the relay's marks cost less;
    /// what is lost is the record of what was published (`purge_published` finds nothing).
    /// Every relay of an outbox should agree: a relay that marks and one that deletes are
    /// both correct, but only the deleted rows leave no trace.
    #[must_use]
    pub fn delete_on_publish(mut self) -> Self {
        self.sql = Arc::new(ClaimSql::new(&self.prefix, true));
        self
    }

    /// Run a claim statement (see [`window_scan`] and [`lease_claimed`] for its parameters;
    /// with `marked`, `$6` are the ids to mark, `$7` the horizon and `$8` the channel) and
    /// note what its scan of the oldest rows found.
    async fn run_claim(
        &self,
        relay_id: &str,
        limit: usize,
        lease: Duration,
        marked: Option<&[uuid::Uuid]>,
    ) -> Result<Vec<OutboxRecord>> {
        let start = self.wakeup.claiming(relay_id);
        if marked.is_none() && start.skip_scan {
            return Ok(Vec::new());
        }
        let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
        let scan_limit = if start.skip_scan { 0 } else { limit_i };
        let sql = match marked {
            None => &self.sql.claim,
            Some(_) => &self.sql.mark_and_claim,
        };
        let mut q = sqlx::query(&sql[usize::from(start.lock_first)])
            .bind(limit_i)
            .bind(claim_window(limit))
            .bind(relay_id)
            .bind(lease.as_secs_f64())
            .bind(scan_limit);
        if let Some(ids) = marked {
            q = q
                .bind(ids)
                .bind(affinity_horizon(limit))
                .bind(self.prefix.outbox_channel());
        }
        let rows = q.fetch_all(&self.pool).await.pg()?;
        // Every row carries the same counts and time to the next due row; the statement
        // returns at least one row.
        let (kept, scanned) = match rows.first() {
            Some(row) => {
                let next: Option<f64> = row.try_get("next_due_in").pg()?;
                self.wakeup.next_due_in(next);
                (
                    row.try_get::<i64, _>("kept").pg()?,
                    row.try_get::<i64, _>("scanned").pg()?,
                )
            }
            None => (0, 0),
        };
        if scan_limit > kept {
            let asked = usize::try_from(scan_limit - kept).unwrap_or(0);
            let found = usize::try_from(scanned).unwrap_or(0);
            self.wakeup.scanned(relay_id, &start, (found, asked, limit));
        }
        let mut recs = Vec::with_capacity(rows.len());
        for row in &rows {
            if row.try_get::<Option<i64>, _>("seq").pg()?.is_some() {
                recs.push(record_of(row)?);
            }
        }
        recs.sort_by_key(|(seq, _)| *seq);
        Ok(recs.into_iter().map(|(_, r)| r).collect())
    }
}

/// How many due, unleased rows a claim of `limit` looks at: ten batches, at least 1000.
fn claim_window(limit: usize) -> i64 {
    i64::try_from(limit.saturating_mul(10).max(1000)).unwrap_or(i64::MAX)
}

/// How far (in sequence numbers) past the oldest due row an aggregate's next row may be for a
/// relay to keep the aggregate when it marks the previous row: ten claim windows. Past that,
/// the row goes back to the common pool, where the oldest rows go first, so an aggregate that
/// never drains cannot keep the others waiting without bound.
fn affinity_horizon(limit: usize) -> i64 {
    claim_window(limit).saturating_mul(10)
}

/// The common claim, as CTE `c` of a statement that binds `$2` (window), `$5` (the batch
/// size) and has CTEs `a` and `d` (rows already claimed by the statement): the heads among the
/// oldest due, unleased, unscheduled rows, at most `limit_expr` of them. An older unpublished row of the same
/// aggregate, leased or delayed, keeps a row out. The window bounds the work of a claim that
/// finds little: without it, a relay whose every head is held by another relay would walk the
/// whole backlog on each try. The window is read once, lazily and in `seq` order: a claim
/// that finds its rows early stops early, and one whose limit is 0 reads nothing.
///
/// Where heads are dense (`lock_first`, the relay's last scan found all it asked for), each
/// row is locked before its aggregate is looked at: rows a concurrent claim is taking then
/// cost a skipped lock instead of a probe, as in an unordered queue (the few non-heads locked
/// on the way are released when the statement commits). Where heads are sparse, locking every
/// row on the way would cost more than probing it, and would hold the very rows that other
/// relays are about to keep as their aggregates' next rows, so rows are probed first.
fn window_scan(p: &TablePrefix, limit_expr: &str, lock_first: bool) -> String {
    if lock_first {
        format!(
            "c AS (
                SELECT o.seq FROM (
                    SELECT seq, aggregate_key FROM {p}outbox
                    WHERE published_at IS NULL AND not_before IS NULL AND available_at <= now()
                      AND (locked_until IS NULL OR locked_until < now())
                    ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED) AS o
                WHERE NOT EXISTS (SELECT 1 FROM {p}outbox e
                                  WHERE e.aggregate_key = o.aggregate_key AND e.published_at IS NULL AND e.seq < o.seq)
                LIMIT {limit_expr})"
        )
    } else {
        format!(
            "w AS (
                SELECT seq FROM {p}outbox
                WHERE published_at IS NULL AND not_before IS NULL AND available_at <= now()
                  AND (locked_until IS NULL OR locked_until < now())
                ORDER BY seq LIMIT $2),
             c AS (
                SELECT o.seq FROM w JOIN {p}outbox o ON o.seq = w.seq
                WHERE o.published_at IS NULL AND o.available_at <= now()
                  AND (o.locked_until IS NULL OR o.locked_until < now())
                  AND NOT EXISTS (SELECT 1 FROM {p}outbox e
                                  WHERE e.aggregate_key = o.aggregate_key AND e.published_at IS NULL AND e.seq < o.seq)
                ORDER BY w.seq LIMIT {limit_expr} FOR UPDATE OF o SKIP LOCKED)"
        )
    }
}

/// CTE `d`: scheduled rows that fell due, unleased, earliest due first, at most `$5` less the
/// rows of `a` (so none when the scan of the oldest rows is skipped). They come before the
/// oldest rows (they are late already) and are found by due time: the rows not yet due are
/// never read. Each is its own aggregate, so none waits behind another row.
fn due_scan(p: &TablePrefix, limit_expr: &str) -> String {
    format!(
        "d AS (
            SELECT seq FROM {p}outbox
            WHERE published_at IS NULL AND not_before IS NOT NULL AND not_before <= now()
              AND available_at <= now() AND (locked_until IS NULL OR locked_until < now())
            ORDER BY not_before LIMIT {limit_expr} FOR UPDATE SKIP LOCKED)"
    )
}

/// The limit of [`due_scan`] in the relays' claims: `$5` less the rows of `a`.
const DUE_LIMIT: &str = "greatest($5 - (SELECT count(*) FROM a), 0)";

/// A claim of the scheduled rows that fell due alone, at most `$1`, leased to `$2` for `$3`
/// seconds: for the WAL relay's timer (the log publishes the other rows). Returns one row even
/// when it claims nothing, to carry the time to the next due row.
pub(crate) fn due_claim_sql(p: &TablePrefix) -> String {
    format!(
        "WITH {due}, {lease}
         SELECT l.*, {next} FROM (SELECT 1) AS one LEFT JOIN l ON true",
        due = due_scan(p, "$1"),
        lease = lease_rows(p, "d", "$2", "$3"),
        next = next_due_in(p),
    )
}

/// The seconds until the next scheduled row falls due (NULL if none is waiting): the relays
/// sleep no longer than that.
fn next_due_in(p: &TablePrefix) -> String {
    format!(
        "(SELECT extract(epoch FROM min(not_before) - now())::float8 FROM {p}outbox
          WHERE published_at IS NULL AND not_before IS NOT NULL AND not_before > now()) AS next_due_in"
    )
}

/// The limit of the scan of the oldest rows: what `$5` leaves after `a` and `d`.
const SCAN_LIMIT: &str = "greatest($5 - (SELECT count(*) FROM a) - (SELECT count(*) FROM d), 0)";

/// CTE `l`: lease the rows of `a`, `d` and `c` to relay `$3` for `$4` seconds.
fn lease_claimed(p: &TablePrefix) -> String {
    lease_rows(
        p,
        "a UNION ALL SELECT seq FROM d UNION ALL SELECT seq FROM c",
        "$3",
        "$4",
    )
}

/// CTE `l`: lease the rows of `from` (`SELECT seq FROM {from}`) to relay `relay` for `secs`
/// seconds.
fn lease_rows(p: &TablePrefix, from: &str, relay: &str, secs: &str) -> String {
    format!(
        "l AS (
            UPDATE {p}outbox o SET locked_by = {relay}, locked_until = now() + make_interval(secs => {secs})
            WHERE o.seq = ANY(ARRAY(SELECT seq FROM {from}))
            RETURNING o.seq, o.id, o.route_kind, o.route, o.headers, o.body, o.aggregate_key, o.created_at, o.publish_attempts)"
    )
}

/// The common claim: the scheduled rows that fell due (see [`due_scan`]), then the heads
/// among the oldest rows (see [`window_scan`]). It returns one row even when it claims
/// nothing, to carry the counts and the time to the next due row.
fn claim_sql(p: &TablePrefix, lock_first: bool) -> String {
    format!(
        "WITH a AS (SELECT NULL::bigint AS seq WHERE false), {due}, {scan}, {lease}
         SELECT l.*, 0::bigint AS kept, (SELECT count(*) FROM c) + (SELECT count(*) FROM d) AS scanned, {next}
         FROM (SELECT 1) AS one LEFT JOIN l ON true",
        due = due_scan(p, DUE_LIMIT),
        scan = window_scan(p, SCAN_LIMIT, lock_first),
        lease = lease_claimed(p),
        next = next_due_in(p),
    )
}

/// One statement marks the confirmed rows and claims, first, each marked aggregate's
/// next row (`a`: the first unpublished row after the marked one; it becomes the head
/// when this commits, so no other relay can have claimed it), then the rest of the
/// batch from the oldest rows (`c`, which skips those successors: in this statement's
/// snapshot their predecessors are unpublished). No unpublished row of the aggregate
/// comes before a marked row: it was a head when claimed, and rows of one aggregate
/// commit in `seq` order (the commit-order lock is taken before the row gets its
/// `seq`). `a` waits for a lock on such a row rather than passing it by: only another
/// relay's scan can hold one (it locks rows before probing them where heads are dense),
/// for the length of its statement, and it cannot claim the row. Other relays are
/// notified only if a new head was left for them (not due, leased, past the horizon,
/// or over the limit).
fn mark_and_claim_sql(p: &TablePrefix, lock_first: bool, delete: bool) -> String {
    format!(
        "WITH m AS ({mark}),
             n AS (
                SELECT s.seq, s.claimable FROM (SELECT aggregate_key, max(seq) AS seq FROM m GROUP BY aggregate_key) AS k
                CROSS JOIN LATERAL (
                    SELECT o.seq, o.available_at <= now() AND (o.locked_until IS NULL OR o.locked_until < now()) AS claimable
                    FROM {p}outbox o
                    WHERE o.aggregate_key = k.aggregate_key AND o.published_at IS NULL AND o.seq > k.seq
                    ORDER BY o.seq LIMIT 1) AS s),
             h AS (
                SELECT min(seq) + $7 AS horizon FROM {p}outbox
                WHERE published_at IS NULL AND not_before IS NULL AND available_at <= now()),
             a AS (
                SELECT o.seq FROM {p}outbox o
                WHERE o.seq IN (SELECT seq FROM n WHERE claimable AND seq <= (SELECT horizon FROM h))
                  AND o.published_at IS NULL AND o.available_at <= now()
                  AND (o.locked_until IS NULL OR o.locked_until < now())
                ORDER BY o.seq LIMIT $1 FOR UPDATE),
             {due}, {scan}, {lease},
             x AS (
                SELECT count(pg_notify(current_schema() || '.' || $8, '')) AS notified
                FROM (SELECT 1 WHERE (SELECT count(*) FROM n) > (SELECT count(*) FROM a)) AS left_over)
             SELECT l.*, (SELECT count(*) FROM a) AS kept, (SELECT count(*) FROM c) + (SELECT count(*) FROM d) AS scanned, {next}
             FROM x LEFT JOIN l ON true",
        mark = mark_rows(p, delete, "$6"),
        due = due_scan(p, DUE_LIMIT),
        scan = window_scan(p, SCAN_LIMIT, lock_first),
        lease = lease_claimed(p),
        next = next_due_in(p),
    )
}

/// The record a row of the outbox holds (the WAL relay's recovery reads rows too).
pub(crate) fn record_of_row(row: &sqlx::postgres::PgRow) -> Result<OutboxRecord> {
    record_of(row).map(|(_, r)| r)
}

fn record_of(row: &sqlx::postgres::PgRow) -> Result<(i64, OutboxRecord)> {
    let kind: String = row.get("route_kind");
    let route = route_from_parts(&kind, row.get("route"))?;
    let headers: Json<Headers> = row.try_get("headers").pg()?;
    let attempts: i32 = row.get("publish_attempts");
    let created_at: DateTime<Utc> = row.get("created_at");
    let id: uuid::Uuid = row.get("id");
    let rec = OutboxRecord {
        id: MessageId::from(id),
        route,
        headers: headers.0,
        body: row.get("body"),
        aggregate_key: row.get("aggregate_key"),
        created_at,
        publish_attempts: u32::try_from(attempts).unwrap_or(0),
    };
    Ok((row.get("seq"), rec))
}

#[async_trait]
impl OutboxStore for PgOutbox {
    async fn claim(
        &self,
        relay_id: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.run_claim(relay_id, limit, lease, None).await
    }

    async fn mark_and_claim(
        &self,
        relay_id: &str,
        published: &[MessageId],
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxRecord>> {
        if published.is_empty() || limit == 0 {
            return postroom_core::outbox::mark_then_claim(self, relay_id, published, limit, lease)
                .await;
        }
        let ids: Vec<uuid::Uuid> = published.iter().map(MessageId::as_uuid).collect();
        self.run_claim(relay_id, limit, lease, Some(&ids)).await
    }

    async fn mark_published(&self, _relay_id: &str, ids: &[MessageId]) -> Result<()> {
        // Not restricted to this relay's lease: the broker confirmed the message, so it is
        // published even if the lease ran out meanwhile.
        let ids: Vec<uuid::Uuid> = ids.iter().map(MessageId::as_uuid).collect();
        sqlx::query(&self.sql.mark)
            .bind(ids)
            .bind(self.prefix.outbox_channel())
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(())
    }

    async fn release(
        &self,
        relay_id: &str,
        id: MessageId,
        error: &str,
        retry_after: Duration,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE {p}outbox SET locked_by = NULL, locked_until = NULL, last_error = $3,
                 publish_attempts = publish_attempts + 1, available_at = now() + make_interval(secs => $4)
             WHERE id = $1 AND published_at IS NULL AND (locked_by = $2 OR locked_by IS NULL)",
            p = self.prefix
        );
        sqlx::query(&sql)
            .bind(id.as_uuid())
            .bind(relay_id)
            .bind(truncate(error, MAX_RELEASE_ERROR_CHARS))
            .bind(retry_after.as_secs_f64())
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(())
    }

    async fn purge_published(&self, older_than: Duration) -> Result<u64> {
        let sql = format!(
            "DELETE FROM {p}outbox WHERE published_at IS NOT NULL AND published_at < now() - make_interval(secs => $1)",
            p = self.prefix
        );
        crate::error::delete_older_than(&self.pool, &sql, older_than).await
    }

    async fn pending(&self) -> Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM {p}outbox WHERE published_at IS NULL",
            p = self.prefix
        );
        crate::fetch_count(&self.pool, sqlx::query(&sql)).await
    }

    async fn wait_for_rows(&self, relay_id: &str, max_wait: Duration) {
        self.wakeup.wait(relay_id, max_wait).await;
    }
}
