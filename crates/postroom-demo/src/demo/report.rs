//! The demo's report, computed from the database, and its invariants.

use crate::shop::ShopFacts;
use crate::verdict::{Rows, counts};
use postroom_core::{ParkedMessage, RetryLadder};
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
    /// Messages produced (order events and poison).
    pub messages: u64,
    /// Orders with a reservation.
    pub reserved: u64,
    /// Orders rejected (out of stock), through the consumer's outbox and back to the orders service.
    pub rejected: u64,
    /// Cancellations applied (aggregate version 2, after version 1).
    pub cancelled: u64,
    /// Parked messages.
    pub parked: u64,
    /// Parked messages with their reasons.
    pub parked_messages: Vec<ParkedLine>,
    /// Messages with no effect and no parking record.
    pub lost: u64,
    /// Effects applied more than once.
    pub duplicate_effects: u64,
    /// Effects applied out of aggregate version order.
    pub order_violations: u64,
    /// Retries scheduled per ladder stage.
    pub retries_by_stage: BTreeMap<String, u64>,
    /// Duplicate deliveries absorbed by the inboxes.
    pub duplicates_absorbed: u64,
    /// Duplicate deliveries the demo injected (republished with the same id).
    pub duplicates_injected: u64,
    /// Times the consumer process was killed with SIGKILL.
    pub consumer_kills: u64,
    /// The order handled when the consumer was killed after COMMIT and before its ack.
    pub killed_order: Option<String>,
    /// Reservations of that order (must be exactly 1).
    pub killed_order_reservations: u64,
    /// Whether that order's message came back and was absorbed as a duplicate.
    pub killed_order_redelivered: bool,
    /// Stock left equals initial stock minus live reservations.
    pub stock_consistent: bool,
    /// Seconds the demo took.
    pub elapsed_s: f64,
    /// Invariants that failed (empty on success).
    pub failures: Vec<String>,
    /// The move from one broker to another, when the run made one (`--migrate-to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationReport>,
}

/// What the move between brokers did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MigrationReport {
    /// The broker the run started on (its transport's name).
    pub from: String,
    /// The broker it moved to.
    pub to: String,
    /// Consumer processes SIGKILLed while both feeds ran, per feed.
    pub overlap_kills: BTreeMap<String, u64>,
    /// Duplicates the inbox absorbed from the start of dual publishing to the end.
    pub overlap_duplicates_absorbed: u64,
    /// Seconds at which each step of the runbook began.
    pub steps: Vec<(String, f64)>,
}

impl DemoReport {
    /// Build from the database facts and the parking lot.
    #[must_use]
    pub fn from_facts(f: &ShopFacts, parked: &[ParkedMessage], ladder: &RetryLadder) -> Self {
        let mut retries_by_stage = BTreeMap::new();
        for (attempt, n) in &f.calls_by_attempt {
            *retries_by_stage
                .entry(ladder.stage_name(ladder.stage_for(attempt - 1)))
                .or_default() += n;
        }
        Self {
            orders: f.orders,
            messages: f.messages,
            reserved: f.reserved,
            rejected: f.rejected,
            cancelled: f.cancelled,
            parked: parked.len() as u64,
            parked_messages: parked
                .iter()
                .map(|p| ParkedLine {
                    id: p.message_id.to_string(),
                    message_type: p.message_type.clone(),
                    code: p.error_code.clone(),
                    reason: p.error_message.clone(),
                    attempts: p.attempts,
                })
                .collect(),
            lost: f.lost_ids.len() as u64,
            duplicate_effects: f.duplicate_effects,
            order_violations: f.order_violations,
            retries_by_stage,
            duplicates_absorbed: f.duplicates_absorbed,
            stock_consistent: f.stock_consistent,
            ..Self::default()
        }
    }

    /// Check every invariant and fault, filling `failures`.
    pub fn check(&mut self, ladder: &RetryLadder, poison_ids: &[String]) {
        let mut f = Vec::new();
        if self.lost != 0 {
            f.push(format!("{} message(s) lost", self.lost));
        }
        if self.duplicate_effects != 0 {
            f.push(format!(
                "{} effect(s) applied twice",
                self.duplicate_effects
            ));
        }
        if self.order_violations != 0 {
            f.push(format!(
                "{} effect(s) applied out of version order",
                self.order_violations
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
        // A poison message is parked on the first delivery a consumer handles, never retried.
        // A consumer SIGKILLed while it held deliveries it had not settled yet gives them back
        // unhandled, and the broker counts each of those deliveries: one more per kill at most.
        let kills = self.consumer_kills
            + self
                .migration
                .as_ref()
                .map_or(0, |m| m.overlap_kills.values().sum::<u64>());
        let allowed = 1 + u32::try_from(kills).unwrap_or(u32::MAX);
        for id in poison_ids {
            if !self.parked_messages.iter().any(|p| {
                &p.id == id && p.attempts <= allowed && !p.reason.contains("budget exhausted")
            }) {
                f.push(format!(
                    "poison message {id} was not parked on its first handled delivery (deliveries allowed: {allowed}, one more per consumer killed)"
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
        if self.cancelled == 0 {
            f.push("no cancellation was applied".into());
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
        let out = Rows { width: 27 };
        postroom_ops::say!();
        postroom_ops::say!("postroom demo report ({:.1} s)", self.elapsed_s);
        out.row(
            "orders created",
            format!(
                "{} ({} messages incl. cancellations and poison)",
                self.orders, self.messages
            ),
        );
        out.row("reserved exactly once", self.reserved);
        out.row(
            "rejected (out of stock)",
            format!(
                "{}  (business outcome via the consumer's outbox)",
                self.rejected
            ),
        );
        out.row(
            "cancellations applied",
            format!(
                "{}  (version 2 only after version 1: version guard)",
                self.cancelled
            ),
        );
        out.row("parked", self.parked);
        for p in &self.parked_messages {
            let plural = if p.attempts == 1 { "y" } else { "ies" };
            postroom_ops::say!(
                "      {} {:<16} {:<24} after {} deliver{plural}",
                p.id,
                p.message_type.as_deref().unwrap_or("<undecodable>"),
                p.code,
                p.attempts
            );
        }
        out.row("retries by stage", counts(&self.retries_by_stage, ": "));
        out.row(
            "duplicates absorbed",
            format!(
                "{} (injected {}, the rest from redeliveries{})",
                self.duplicates_absorbed,
                self.duplicates_injected,
                if self.migration.is_some() {
                    " and the second broker's copies"
                } else {
                    ""
                }
            ),
        );
        out.row(
            "consumer SIGKILLed",
            format!(
                "{} time(s) after COMMIT, before ack; order {} reserved {} time(s)",
                self.consumer_kills,
                self.killed_order.as_deref().unwrap_or("-"),
                self.killed_order_reservations
            ),
        );
        if let Some(m) = &self.migration {
            out.row("moved", format!("{} -> {}", m.from, m.to));
            for (step, at) in &m.steps {
                postroom_ops::say!("      {at:>6.1}s  {step}");
            }
            out.row("killed in the overlap", counts(&m.overlap_kills, " "));
            out.row(
                "absorbed in the overlap",
                format!(
                    "{} duplicate(s), same id from both brokers",
                    m.overlap_duplicates_absorbed
                ),
            );
        }
        out.invariants(
            self.lost,
            self.duplicate_effects,
            self.order_violations,
            self.stock_consistent,
            &self.failures,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poison(attempts: u32, reason: &str) -> ParkedLine {
        ParkedLine {
            id: "p1".into(),
            message_type: Some("order.created".into()),
            code: "malformed".into(),
            reason: reason.into(),
            attempts,
        }
    }

    fn poison_failures(kills: u64, parked: ParkedLine) -> Vec<String> {
        let mut r = DemoReport {
            consumer_kills: kills,
            parked_messages: vec![parked],
            ..DemoReport::default()
        };
        r.check(&RetryLadder::default(), &["p1".to_string()]);
        r.failures
            .into_iter()
            .filter(|f| f.contains("poison message p1"))
            .collect()
    }

    #[test]
    fn a_poison_message_may_come_once_more_per_consumer_killed_but_is_never_retried() {
        assert!(poison_failures(0, poison(1, "undecodable body")).is_empty());
        assert_eq!(poison_failures(0, poison(2, "undecodable body")).len(), 1);
        assert!(poison_failures(1, poison(2, "undecodable body")).is_empty());
        assert_eq!(poison_failures(1, poison(3, "undecodable body")).len(), 1);
        assert_eq!(
            poison_failures(3, poison(2, "retry budget exhausted")).len(),
            1,
            "a poison message that went through the retries is a failure"
        );
    }
}
