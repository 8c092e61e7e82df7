//! The demo's report, computed from the databases (never from in-memory counters), and its
//! invariants.

use super::inventory::CONSUMER;
use postroom_core::{ParkingFilter, ParkingStore, RetryLadder};
use postroom_sqlite::SqliteStore;
use serde::Serialize;
use std::collections::BTreeMap;

/// One parked message in the report.
#[derive(Clone, Debug, Serialize)]
pub struct ParkedLine {
    /// Message id.
    pub id: String,
    /// Type, when known.
    pub message_type: Option<String>,
    /// Error code.
    pub code: String,
    /// Error text.
    pub reason: String,
    /// Deliveries.
    pub attempts: u32,
}

/// The report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DemoReport {
    /// Orders created.
    pub orders: u64,
    /// Orders with a reservation.
    pub reserved: u64,
    /// Orders rejected (out of stock), through the consumer's outbox and back to the orders service.
    pub rejected: u64,
    /// Parked messages (orders whose budget ran out, and poison messages).
    pub parked: u64,
    /// Parked messages with their reasons.
    pub parked_messages: Vec<ParkedLine>,
    /// Orders with no reservation, no rejection and no parked record.
    pub lost: u64,
    /// Effects applied more than once (extra reservations, or reserved and rejected).
    pub duplicate_effects: u64,
    /// Retries scheduled per ladder stage (from the consumer's recorded attempts).
    pub retries_by_stage: BTreeMap<String, u64>,
    /// Duplicate deliveries absorbed by the inbox.
    pub duplicates_absorbed: u64,
    /// Duplicate deliveries the demo injected (republished with the same id).
    pub duplicates_injected: u64,
    /// Times the consumer process was killed with SIGKILL.
    pub consumer_kills: u64,
    /// The order handled when the consumer was killed after COMMIT and before ack.
    pub killed_order: Option<String>,
    /// Reservations of that order (must be exactly 1).
    pub killed_order_reservations: u64,
    /// Whether that order's message came back and was absorbed as a duplicate.
    pub killed_order_redelivered: bool,
    /// Stock left equals initial stock minus reservations.
    pub stock_consistent: bool,
    /// Seconds the demo took.
    pub elapsed_s: f64,
    /// Invariants that failed (empty on success).
    pub failures: Vec<String>,
}

async fn scalar(store: &SqliteStore, sql: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql).fetch_one(store.pool()).await
}

/// Compute the report from the database.
pub async fn compute(
    store: &SqliteStore,
    ladder: &RetryLadder,
) -> postroom_core::Result<DemoReport> {
    let q = |sql: &'static str| async move {
        scalar(store, sql).await.map_err(postroom_sqlite::map_error)
    };
    let mut r = DemoReport {
        orders: q("SELECT COUNT(*) FROM orders").await? as u64,
        reserved: q("SELECT COUNT(DISTINCT order_id) FROM reservations").await? as u64,
        rejected: q("SELECT COUNT(*) FROM orders WHERE status = 'rejected'").await? as u64,
        duplicates_absorbed: q("SELECT COUNT(*) FROM demo_duplicates").await? as u64,
        ..DemoReport::default()
    };
    let extra = q("SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM reservations GROUP BY order_id)").await?;
    let both = q("SELECT COUNT(*) FROM orders o WHERE o.status = 'rejected' AND EXISTS (SELECT 1 FROM reservations r WHERE r.order_id = o.id)").await?;
    r.duplicate_effects = (extra + both) as u64;
    let filter = ParkingFilter {
        consumer: Some(CONSUMER.into()),
        include_redriven: true,
        ..ParkingFilter::default()
    };
    let parked = store.search(&filter, 10_000).await?;
    r.parked = parked.len() as u64;
    r.parked_messages = parked
        .iter()
        .map(|p| ParkedLine {
            id: p.message_id.to_string(),
            message_type: p.message_type.clone(),
            code: p.error_code.clone(),
            reason: p.error_message.clone(),
            attempts: p.attempts,
        })
        .collect();
    let parked_ids: Vec<String> = parked.iter().map(|p| p.message_id.to_string()).collect();
    let orders: Vec<(String, String, String)> =
        sqlx::query_as("SELECT id, status, message_id FROM orders")
            .fetch_all(store.pool())
            .await
            .map_err(postroom_sqlite::map_error)?;
    let reserved: Vec<String> = sqlx::query_scalar("SELECT DISTINCT order_id FROM reservations")
        .fetch_all(store.pool())
        .await
        .map_err(postroom_sqlite::map_error)?;
    r.lost = orders
        .iter()
        .filter(|(id, status, mid)| {
            status != "rejected" && !reserved.contains(id) && !parked_ids.contains(mid)
        })
        .count() as u64;
    let attempts: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT attempt, COUNT(*) FROM demo_attempts WHERE attempt > 0 GROUP BY attempt",
    )
    .fetch_all(store.pool())
    .await
    .map_err(postroom_sqlite::map_error)?;
    for (attempt, n) in attempts {
        let stage = ladder.stage_name(ladder.stage_for((attempt - 1) as u32));
        *r.retries_by_stage.entry(stage).or_default() += n as u64;
    }
    let stock_ok = q("SELECT COUNT(*) FROM stock s WHERE s.initial - s.available != COALESCE((SELECT SUM(qty) FROM reservations r WHERE r.sku = s.sku), 0)").await?;
    r.stock_consistent = stock_ok == 0;
    Ok(r)
}

impl DemoReport {
    /// Check every invariant and fault, filling `failures`.
    pub fn check(&mut self, ladder: &RetryLadder, poison_ids: &[String]) {
        let mut f = Vec::new();
        if self.lost != 0 {
            f.push(format!("{} order(s) lost", self.lost));
        }
        if self.duplicate_effects != 0 {
            f.push(format!(
                "{} effect(s) applied twice",
                self.duplicate_effects
            ));
        }
        if !self.stock_consistent {
            f.push("stock does not match reservations".into());
        }
        for stage in 0..ladder.len() {
            let name = ladder.stage_name(stage);
            if self.retries_by_stage.get(&name).copied().unwrap_or(0) == 0 {
                f.push(format!("no retry went through stage {name}"));
            }
        }
        for id in poison_ids {
            if !self
                .parked_messages
                .iter()
                .any(|p| &p.id == id && p.attempts == 1)
            {
                f.push(format!(
                    "poison message {id} was not parked on its first delivery"
                ));
            }
        }
        if !self
            .parked_messages
            .iter()
            .any(|p| p.reason.contains("budget exhausted"))
        {
            f.push("the order whose failure outlasts the budget was not parked".into());
        }
        if self.rejected == 0 {
            f.push("no out-of-stock order was rejected".into());
        }
        if self.duplicates_absorbed < self.duplicates_injected {
            f.push(format!(
                "{} duplicates injected, only {} absorbed",
                self.duplicates_injected, self.duplicates_absorbed
            ));
        }
        if self.consumer_kills == 0 {
            f.push("the consumer was never killed between commit and ack".into());
        }
        if self.killed_order_reservations != 1 || !self.killed_order_redelivered {
            f.push(format!(
                "the killed consumer's order has {} reservation(s), redelivered: {}",
                self.killed_order_reservations, self.killed_order_redelivered
            ));
        }
        self.failures = f;
    }

    /// A human summary.
    pub fn print(&self) {
        println!();
        println!("postroom demo report ({:.1} s)", self.elapsed_s);
        println!("  orders created ............ {}", self.orders);
        println!("  reserved exactly once ..... {}", self.reserved);
        println!(
            "  rejected (out of stock) ... {}  (business outcome via the consumer's outbox)",
            self.rejected
        );
        println!("  parked .................... {}", self.parked);
        for p in &self.parked_messages {
            println!(
                "      {} {:<24} {:<24} after {} deliver{}",
                p.id,
                p.message_type.as_deref().unwrap_or("<undecodable>"),
                p.code,
                p.attempts,
                if p.attempts == 1 { "y" } else { "ies" }
            );
        }
        let stages: Vec<String> = self
            .retries_by_stage
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        println!("  retries by stage .......... {}", stages.join(", "));
        println!(
            "  duplicates absorbed ....... {} (injected {}, the rest from redeliveries)",
            self.duplicates_absorbed, self.duplicates_injected
        );
        println!(
            "  consumer SIGKILLed ........ {} time(s) after COMMIT, before ack; order {} reserved {} time(s)",
            self.consumer_kills,
            self.killed_order.as_deref().unwrap_or("-"),
            self.killed_order_reservations
        );
        println!("  lost ...................... {}", self.lost);
        println!("  duplicate effects ......... {}", self.duplicate_effects);
        println!("  stock consistent .......... {}", self.stock_consistent);
        if self.failures.is_empty() {
            println!("all invariants hold");
        } else {
            for f in &self.failures {
                println!("INVARIANT FAILED: {f}");
            }
        }
    }
}
