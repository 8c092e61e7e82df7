//! What an operations console needs of a parking lot beyond [`ParkingStore`](super::ParkingStore):
//! listings with full text and paging, the archive ([`ParkingArchive`]), and the audit of
//! operators' acts with the live control of redrive runs ([`AuditLog`]). Each store implements
//! both, so that a console is written once over any of them.

use super::ParkedMessage;
use super::records::{AuditEntry, ParkedSummary, ParkingQuery, RunControl};
use crate::envelope::MessageId;
use crate::error::Result;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// Listings of parked copies and their archive (copies hidden from listings, purged once
/// their retention ends). Queries have the semantics of [`ParkingQuery::matches`].
#[async_trait]
pub trait ParkingArchive: Send + Sync {
    /// Parked copies matching `q`, newest first, skipping `offset`, at most `limit`.
    async fn query_parked(
        &self,
        q: &ParkingQuery,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ParkedMessage>>;

    /// How many copies match `q`.
    async fn count_parked(&self, q: &ParkingQuery) -> Result<u64>;

    /// Summaries (no headers, no body) of the copies matching `q`, newest first, at most
    /// `limit`.
    async fn parked_summaries(&self, q: &ParkingQuery, limit: usize) -> Result<Vec<ParkedSummary>>;

    /// Archive the current copies of `(consumer, id)` pairs for `operator` until
    /// `purge_after`. Returns how many copies were archived.
    async fn archive_parked(
        &self,
        items: &[(String, MessageId)],
        operator: &str,
        purge_after: DateTime<Utc>,
    ) -> Result<u64>;

    /// Archived copies whose retention ended before `now`.
    async fn purgeable(&self, now: DateTime<Utc>) -> Result<u64>;

    /// Delete archived copies whose retention ended before `now`, and their archive entries.
    /// Copies parked again since they were archived are kept. Returns how many were deleted.
    async fn purge_archived(&self, now: DateTime<Utc>) -> Result<u64>;
}

/// The audit of operators' state changes, and the live state of redrive runs driven from a
/// console (rate, paused or cancelled, messages that joined the group meanwhile).
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Append `e` to the audit (its `id` is ignored). Returns the stored id.
    async fn append_audit(&self, e: &AuditEntry) -> Result<i64>;

    /// Audit entries, newest first, at most `limit`; only those about `target` when given.
    async fn audit_entries(&self, target: Option<&str>, limit: usize) -> Result<Vec<AuditEntry>> {
        self.audit_page(target, None, limit).await
    }

    /// A page of audit entries: newest first, only those with an id below `before` when
    /// given (the last id of the page before), at most `limit`; only those about `target`
    /// when given.
    async fn audit_page(
        &self,
        target: Option<&str>,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>>;

    /// Store `c` (insert or replace by run id).
    async fn save_run_control(&self, c: &RunControl) -> Result<()>;

    /// The control of run `run_id`, if a console drove it.
    async fn run_control(&self, run_id: &str) -> Result<Option<RunControl>>;
}
