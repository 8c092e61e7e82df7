//! The queries behind [`ShopFacts`]: plain SQL without parameters, the same on every store,
//! and one function that turns their results into facts.

use super::ShopFacts;
use postroom_core::MessageId;
use std::collections::HashSet;

/// Every produced message id.
pub const PRODUCED: &str = "SELECT message_id FROM shop_messages";
/// Message ids with an inventory effect.
pub const WITH_EFFECT: &str =
    "SELECT DISTINCT message_id FROM shop_effects WHERE consumer = 'inventory'";
/// Handler calls per retry attempt.
pub const ATTEMPTS: &str =
    "SELECT attempt, COUNT(*) FROM shop_attempts WHERE attempt > 0 GROUP BY attempt";

/// Counting queries; [`assemble`] reads their results by position.
pub const COUNTS: [&str; 13] = [
    "SELECT COUNT(*) FROM shop_orders",
    "SELECT COUNT(DISTINCT order_id) FROM shop_reservations",
    "SELECT COUNT(*) FROM shop_orders WHERE status = 'rejected'",
    "SELECT COUNT(*) FROM shop_effects WHERE kind = 'cancelled'",
    // Effects applied twice: a message with two effect rows, an order reserved twice, an
    // order both reserved and rejected.
    "SELECT COUNT(*) FROM (SELECT 1 FROM shop_effects GROUP BY consumer, message_id HAVING COUNT(*) > 1) d",
    "SELECT COUNT(*) FROM (SELECT 1 FROM shop_reservations GROUP BY order_id HAVING COUNT(*) > 1) d",
    "SELECT COUNT(*) FROM shop_orders o WHERE o.status = 'rejected'
       AND EXISTS (SELECT 1 FROM shop_reservations r WHERE r.order_id = o.id)",
    "SELECT COUNT(*) FROM shop_effects WHERE consumer = 'inventory' AND ord_seq != version",
    "SELECT COUNT(*) FROM shop_duplicates",
    "SELECT COUNT(*) FROM shop_stock s WHERE s.initial - s.available !=
       COALESCE((SELECT SUM(qty) FROM shop_reservations r WHERE r.sku = s.sku AND r.status = 'reserved'), 0)",
    "SELECT COALESCE(MAX(size), 0) FROM shop_batches",
    // Deliveries the version guard decided against the order it met: a version applied that
    // was not the next one, one held back that was, one called a duplicate that was ahead.
    "SELECT COUNT(*) FROM shop_deliveries WHERE
       (outcome = 'applied' AND version != seen + 1)
       OR (outcome = 'gap' AND version <= seen + 1)
       OR (outcome = 'duplicate' AND version > seen + 1)",
    // Deliveries the transport made ahead of their turn (an earlier version not yet applied).
    "SELECT COUNT(*) FROM shop_deliveries WHERE version > seen + 1",
];

/// What the queries returned.
pub struct Raw {
    /// Results of [`COUNTS`], in order.
    pub counts: [i64; COUNTS.len()],
    /// Result of [`PRODUCED`].
    pub produced: Vec<String>,
    /// Result of [`WITH_EFFECT`].
    pub with_effect: HashSet<String>,
    /// Result of [`ATTEMPTS`].
    pub attempts: Vec<(i64, i64)>,
}

/// Facts from the raw results; a parked message counts as an outcome.
#[must_use]
pub fn assemble(raw: Raw, parked_ids: &[MessageId]) -> ShopFacts {
    let parked: HashSet<String> = parked_ids.iter().map(ToString::to_string).collect();
    let c = raw.counts.map(|n| n as u64);
    ShopFacts {
        orders: c[0],
        messages: raw.produced.len() as u64,
        reserved: c[1],
        rejected: c[2],
        cancelled: c[3],
        lost_ids: raw
            .produced
            .into_iter()
            .filter(|m| !raw.with_effect.contains(m) && !parked.contains(m))
            .collect(),
        duplicate_effects: c[4] + c[5] + c[6],
        order_violations: c[7] + c[11],
        reordered_deliveries: c[12],
        calls_by_attempt: raw
            .attempts
            .into_iter()
            .map(|(a, n)| (a as u32, n as u64))
            .collect(),
        duplicates_absorbed: c[8],
        stock_consistent: c[9] == 0,
        largest_batch: c[10],
    }
}
