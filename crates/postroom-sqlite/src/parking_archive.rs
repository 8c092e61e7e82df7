//! Listings beyond [`ParkingStore`](postroom_core::ParkingStore) for an operations console:
//! full text over the error message, newest first with paging, light summaries for grouping,
//! and the archive (copies hidden from listings, purged once their retention ends).
//!
//! An archive entry names the copy by its `parked_at`: when the same message is parked again
//! it is a new copy, shown again.

use crate::SqliteStore;
use crate::error::SqlxResultExt;
use crate::parking::{parked, push_filter, row_error_class, row_message_id, row_status};
use crate::time::{from_ms, now_ms};
use chrono::{DateTime, Utc};
use postroom_core::sql_store::PARKED_SUMMARY_COLUMNS;
use postroom_core::{
    MessageId, ParkedMessage, ParkedSummary, ParkingArchive, ParkingQuery, Result, async_trait,
};
use sqlx::sqlite::SqliteRow;
use sqlx::{QueryBuilder, Row, Sqlite};

/// The parking table with an `archived` column (1 when the copy's archive entry exists).
const WITH_ARCHIVE: &str = "(SELECT p.*, (a.consumer IS NOT NULL) AS archived
    FROM postroom_parking p LEFT JOIN postroom_parking_archive a
      ON a.consumer = p.consumer AND a.message_id = p.message_id AND a.parked_at = p.parked_at)";

/// `LIKE` pattern for a word: `%`, `_` and `\` escaped.
fn like_word(word: &str) -> String {
    let mut s = String::with_capacity(word.len() + 2);
    s.push('%');
    for c in word.chars() {
        if matches!(c, '%' | '_' | '\\') {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('%');
    s
}

/// Append `WHERE …` for `q` (same semantics as [`ParkingQuery::matches`]). SQLite's `LIKE`
/// ignores ASCII case only, as the reference does.
fn push_query(b: &mut QueryBuilder<'_, Sqlite>, q: &ParkingQuery) {
    push_filter(b, &q.filter);
    b.push(" AND archived = ").push_bind(i64::from(q.archived));
    for w in q.words() {
        b.push(" AND error_message LIKE ")
            .push_bind(like_word(&w))
            .push(" ESCAPE '\\'");
    }
}

/// A summary from a row selected with the columns of [`ParkedSummary`]. A status other than
/// redriven reads as parked.
fn summary(r: &SqliteRow) -> Result<ParkedSummary> {
    Ok(ParkedSummary {
        message_id: row_message_id(r)?,
        consumer: r.get("consumer"),
        message_type: r.get("message_type"),
        error_class: row_error_class(r)?,
        error_code: r.get("error_code"),
        error_message: r.get("error_message"),
        parked_at: from_ms(r.get("parked_at")),
        status: row_status(r),
    })
}

#[async_trait]
impl ParkingArchive for SqliteStore {
    /// Parked copies matching `q`, newest first, skipping `offset`, at most `limit`.
    async fn query_parked(
        &self,
        q: &ParkingQuery,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ParkedMessage>> {
        let mut b = QueryBuilder::<Sqlite>::new(format!("SELECT * FROM {WITH_ARCHIVE}"));
        push_query(&mut b, q);
        b.push(" ORDER BY parked_at DESC, consumer, message_id LIMIT ")
            .push_bind(limit as i64)
            .push(" OFFSET ")
            .push_bind(offset as i64);
        let rows = b.build().fetch_all(self.pool()).await.db()?;
        rows.iter().map(parked).collect()
    }

    /// How many copies match `q`.
    async fn count_parked(&self, q: &ParkingQuery) -> Result<u64> {
        let mut b = QueryBuilder::<Sqlite>::new(format!("SELECT COUNT(*) FROM {WITH_ARCHIVE}"));
        push_query(&mut b, q);
        let n: i64 = b.build_query_scalar().fetch_one(self.pool()).await.db()?;
        Ok(n as u64)
    }

    /// Summaries (no headers, no body) of the copies matching `q`, newest first, at most
    /// `limit`.
    async fn parked_summaries(&self, q: &ParkingQuery, limit: usize) -> Result<Vec<ParkedSummary>> {
        let mut b = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {PARKED_SUMMARY_COLUMNS} FROM {WITH_ARCHIVE}"
        ));
        push_query(&mut b, q);
        b.push(" ORDER BY parked_at DESC, consumer, message_id LIMIT ")
            .push_bind(limit as i64);
        let rows = b.build().fetch_all(self.pool()).await.db()?;
        rows.iter().map(summary).collect()
    }

    /// Archive the current copies of `(consumer, id)` pairs for `operator`, to be purged
    /// after `purge_after`. Returns how many copies were archived (pairs with no parked copy
    /// are skipped).
    async fn archive_parked(
        &self,
        items: &[(String, MessageId)],
        operator: &str,
        purge_after: DateTime<Utc>,
    ) -> Result<u64> {
        let now = now_ms();
        let mut tx = self.begin().await?;
        let mut n = 0;
        for (consumer, id) in items {
            let done = sqlx::query(
                "INSERT INTO postroom_parking_archive (consumer, message_id, parked_at, archived_at, archived_by, purge_after)
                 SELECT consumer, message_id, parked_at, ?, ?, ? FROM postroom_parking
                 WHERE consumer = ? AND message_id = ?
                 ON CONFLICT (consumer, message_id) DO UPDATE SET parked_at = excluded.parked_at,
                    archived_at = excluded.archived_at, archived_by = excluded.archived_by,
                    purge_after = excluded.purge_after",
            )
            .bind(now)
            .bind(operator)
            .bind(purge_after.timestamp_millis())
            .bind(consumer)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
            n += done.rows_affected();
        }
        tx.commit().await.db()?;
        Ok(n)
    }

    /// Archived copies whose retention ended before `now`: how many [`purge_archived`]
    /// would delete.
    ///
    /// [`purge_archived`]: SqliteStore::purge_archived
    async fn purgeable(&self, now: DateTime<Utc>) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM postroom_parking_archive a JOIN postroom_parking p
               ON a.consumer = p.consumer AND a.message_id = p.message_id AND a.parked_at = p.parked_at
             WHERE a.purge_after <= ?",
        )
        .bind(now.timestamp_millis())
        .fetch_one(self.pool())
        .await
        .db()?;
        Ok(n as u64)
    }

    /// Delete archived copies whose retention ended before `now` (their archive entries
    /// too). Copies parked again since they were archived are kept. Returns how many copies
    /// were deleted.
    async fn purge_archived(&self, now: DateTime<Utc>) -> Result<u64> {
        let t = now.timestamp_millis();
        let mut tx = self.begin().await?;
        let done = sqlx::query(
            "DELETE FROM postroom_parking WHERE EXISTS (
                SELECT 1 FROM postroom_parking_archive a
                WHERE a.consumer = postroom_parking.consumer AND a.message_id = postroom_parking.message_id
                  AND a.parked_at = postroom_parking.parked_at AND a.purge_after <= ?)",
        )
        .bind(t)
        .execute(&mut *tx)
        .await
        .db()?;
        sqlx::query("DELETE FROM postroom_parking_archive WHERE purge_after <= ?")
            .bind(t)
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(done.rows_affected())
    }
}
