//! Listings beyond [`ParkingStore`](postroom_core::ParkingStore) for an operations console:
//! full text over the error message, newest first with paging, light summaries for grouping,
//! and the archive (copies hidden from listings, purged once their retention ends). The SQL
//! has the semantics of [`ParkingQuery::matches`]: the words are matched case-insensitively
//! for ASCII letters only, as the reference does.

use super::{PgParking, filter, limit_of, row};
use crate::error::{SqlxResultExt, commit};
use crate::fetch_count;
use chrono::{DateTime, Utc};
use postroom_core::sql_store::PARKED_SUMMARY_COLUMNS;
use postroom_core::{
    Error, ErrorClass, ErrorKind, MessageId, ParkedMessage, ParkedStatus, ParkedSummary,
    ParkingArchive, ParkingQuery, Result, async_trait,
};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Postgres, Row};

/// ASCII lower-casing, as `str::to_ascii_lowercase` (PostgreSQL's `lower` follows the locale).
const ASCII_LOWER: &str =
    "translate(error_message, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')";

impl PgParking {
    /// The parked table with an `archived` column, and the WHERE clause of a query over it
    /// (parameters `$1`–`$10`).
    fn view_and_where(&self) -> String {
        format!(
            "(SELECT m.*, (a.consumer IS NOT NULL) AS archived FROM {p}parked m
               LEFT JOIN {p}parked_archive a
                 ON a.consumer = m.consumer AND a.message_id = m.message_id AND a.parked_at = m.parked_at) AS v
             WHERE {w} AND archived = $9
               AND NOT EXISTS (SELECT 1 FROM unnest($10::text[]) AS t(word) WHERE strpos({ASCII_LOWER}, t.word) = 0)",
            p = self.prefix,
            w = filter::WHERE
        )
    }

    /// The columns `cols` of the copies matching a query, newest first, at most `$11` of
    /// them.
    fn newest_first(&self, cols: &str) -> String {
        format!(
            "SELECT {cols} FROM {v} ORDER BY parked_at DESC, consumer, message_id LIMIT $11",
            v = self.view_and_where()
        )
    }
}

/// `sql` (a statement over [`PgParking::view_and_where`]) with the query's parameters
/// `$1`–`$10` bound: the filter's eight, whether archived copies are wanted, and the words.
fn bind_query<'q>(sql: &'q str, q: &'q ParkingQuery) -> Query<'q, Postgres, PgArguments> {
    filter::bind(sqlx::query(sql), &q.filter)
        .bind(q.archived)
        .bind(q.words())
}

/// A summary from a row selected with the columns of [`ParkedSummary`]. A status other than
/// redriven reads as parked.
fn summary(r: &PgRow) -> Result<ParkedSummary> {
    let class: String = r.try_get("error_class").pg()?;
    let status: String = r.try_get("status").pg()?;
    let id: uuid::Uuid = r.try_get("message_id").pg()?;
    Ok(ParkedSummary {
        message_id: MessageId::from(id),
        consumer: r.try_get("consumer").pg()?,
        message_type: r.try_get("message_type").pg()?,
        error_class: class
            .parse::<ErrorClass>()
            .map_err(|e| Error::new(ErrorKind::InvalidData, e))?,
        error_code: r.try_get("error_code").pg()?,
        error_message: r.try_get("error_message").pg()?,
        parked_at: r.try_get("parked_at").pg()?,
        status: status.parse().unwrap_or(ParkedStatus::Parked),
    })
}

#[async_trait]
impl ParkingArchive for PgParking {
    /// Parked copies matching `q`, newest first, skipping `offset`, at most `limit`.
    async fn query_parked(
        &self,
        q: &ParkingQuery,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ParkedMessage>> {
        let sql = format!("{} OFFSET $12", self.newest_first(row::COLUMNS));
        let query = bind_query(&sql, q)
            .bind(limit_of(limit))
            .bind(limit_of(offset));
        row::fetch_all(&self.pool, query).await
    }

    /// How many copies match `q`.
    async fn count_parked(&self, q: &ParkingQuery) -> Result<u64> {
        let sql = format!("SELECT count(*) FROM {}", self.view_and_where());
        fetch_count(&self.pool, bind_query(&sql, q)).await
    }

    /// Summaries (no headers, no body) of the copies matching `q`, newest first.
    async fn parked_summaries(&self, q: &ParkingQuery, limit: usize) -> Result<Vec<ParkedSummary>> {
        let sql = self.newest_first(PARKED_SUMMARY_COLUMNS);
        let rows = bind_query(&sql, q)
            .bind(limit_of(limit))
            .fetch_all(&self.pool)
            .await
            .pg()?;
        rows.iter().map(summary).collect()
    }

    /// Archive the current copies of `(consumer, id)` pairs for `operator` until
    /// `purge_after`. Returns how many copies were archived.
    async fn archive_parked(
        &self,
        items: &[(String, MessageId)],
        operator: &str,
        purge_after: DateTime<Utc>,
    ) -> Result<u64> {
        let consumers: Vec<&str> = items.iter().map(|(c, _)| c.as_str()).collect();
        let ids: Vec<uuid::Uuid> = items.iter().map(|(_, id)| id.as_uuid()).collect();
        let sql = format!(
            "INSERT INTO {p}parked_archive (consumer, message_id, parked_at, archived_by, purge_after)
             SELECT m.consumer, m.message_id, m.parked_at, $3, $4 FROM {p}parked m
             JOIN unnest($1::text[], $2::uuid[]) AS s(consumer, message_id)
               ON s.consumer = m.consumer AND s.message_id = m.message_id
             ON CONFLICT (consumer, message_id) DO UPDATE SET parked_at = EXCLUDED.parked_at,
                archived_at = now(), archived_by = EXCLUDED.archived_by, purge_after = EXCLUDED.purge_after",
            p = self.prefix
        );
        let done = sqlx::query(&sql)
            .bind(consumers)
            .bind(ids)
            .bind(operator)
            .bind(purge_after)
            .execute(&self.pool)
            .await
            .pg()?;
        Ok(done.rows_affected())
    }

    /// Archived copies whose retention ended before `now`.
    async fn purgeable(&self, now: DateTime<Utc>) -> Result<u64> {
        let sql = format!(
            "SELECT count(*) FROM {p}parked_archive a JOIN {p}parked m
               ON a.consumer = m.consumer AND a.message_id = m.message_id AND a.parked_at = m.parked_at
             WHERE a.purge_after <= $1",
            p = self.prefix
        );
        fetch_count(&self.pool, sqlx::query(&sql).bind(now)).await
    }

    /// Delete archived copies whose retention ended before `now`, and their archive entries.
    /// Copies parked again since they were archived are kept. Returns how many were deleted.
    async fn purge_archived(&self, now: DateTime<Utc>) -> Result<u64> {
        let mut tx = self.pool.begin().await.pg()?;
        let done = sqlx::query(&format!(
            "DELETE FROM {p}parked m USING {p}parked_archive a
             WHERE a.consumer = m.consumer AND a.message_id = m.message_id
               AND a.parked_at = m.parked_at AND a.purge_after <= $1",
            p = self.prefix
        ))
        .bind(now)
        .execute(&mut *tx)
        .await
        .pg()?;
        sqlx::query(&format!(
            "DELETE FROM {p}parked_archive WHERE purge_after <= $1",
            p = self.prefix
        ))
        .bind(now)
        .execute(&mut *tx)
        .await
        .pg()?;
        commit(tx).await?;
        Ok(done.rows_affected())
    }
}
