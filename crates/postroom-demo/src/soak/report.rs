//! The soak's summary, read from the databases and the parking store at the end.

use crate::verdict::Rows;
use serde::Serialize;

/// The soak's summary.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SoakReport {
    /// Messages produced (order events and poison).
    pub messages: u64,
    /// Orders produced.
    pub orders: u64,
    /// SIGKILLs of relays and consumers.
    pub kills: u64,
    /// Relay kills.
    pub relay_kills: u64,
    /// Consumer kills.
    pub consumer_kills: u64,
    /// Broker restarts.
    pub broker_restarts: u64,
    /// Messages with no effect and no parking record.
    pub lost: u64,
    /// Effects applied more than once.
    pub duplicate_effects: u64,
    /// Effects applied out of aggregate order.
    pub order_violations: u64,
    /// Deliveries the transport made ahead of their turn, held back by the version guard.
    pub reordered_deliveries: u64,
    /// Parked messages.
    pub parked: u64,
    /// Parked messages that were not poison (should be none).
    pub parked_unexpected: u64,
    /// Orders reserved.
    pub reserved: u64,
    /// Orders rejected and applied back by the orders service.
    pub rejected: u64,
    /// Out-of-stock orders produced.
    pub out_of_stock_orders: u64,
    /// Cancellations applied.
    pub cancelled: u64,
    /// Duplicate deliveries absorbed by the inboxes.
    pub duplicates_absorbed: u64,
    /// Handler calls that were retries.
    pub retried_calls: u64,
    /// Stock matches reservations.
    pub stock_consistent: bool,
    /// Most messages per inventory transaction the consumers were allowed (0: one each).
    pub batch_size: u32,
    /// Most messages an inventory transaction applied (0: the per-message consumer ran).
    pub largest_batch: u64,
    /// Seconds from start to quiescence.
    pub elapsed_s: f64,
    /// Messages per second over the run.
    pub throughput_msgs_per_s: f64,
    /// Invariants that failed.
    pub failures: Vec<String>,
}

impl SoakReport {
    /// A human summary.
    pub fn print(&self) {
        let r = self;
        let out = Rows { width: 23 };
        postroom_ops::say!();
        postroom_ops::say!(
            "postroom soak ({:.1} s, {:.0} messages/s)",
            r.elapsed_s,
            r.throughput_msgs_per_s
        );
        out.row("messages", format!("{} ({} orders)", r.messages, r.orders));
        out.row(
            "kills (SIGKILL)",
            format!(
                "{} ({} relay, {} consumer)",
                r.kills, r.relay_kills, r.consumer_kills
            ),
        );
        out.row("reserved", r.reserved);
        out.row(
            "rejected",
            format!(
                "{} of {} out-of-stock orders",
                r.rejected, r.out_of_stock_orders
            ),
        );
        out.row("cancelled", r.cancelled);
        out.row(
            "parked",
            format!("{} ({} not poison)", r.parked, r.parked_unexpected),
        );
        out.row("duplicates absorbed", r.duplicates_absorbed);
        out.row("held back out of order", r.reordered_deliveries);
        out.row("retried handler calls", r.retried_calls);
        if r.batch_size > 0 {
            out.row(
                "largest batch",
                format!("{} (at most {})", r.largest_batch, r.batch_size),
            );
        }
        out.invariants(
            r.lost,
            r.duplicate_effects,
            r.order_violations,
            r.stock_consistent,
            &r.failures,
        );
    }
}
