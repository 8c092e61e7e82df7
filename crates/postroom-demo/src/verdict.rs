//! How a run ends: its report printed and written as JSON, and a failure when an invariant
//! did not hold.

use postroom_ops::{OpsError, OpsResult};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Print one report line: `label` and dots up to column `width`, then `value`.
pub fn row(width: usize, label: &str, value: impl std::fmt::Display) {
    let dots = ".".repeat(width.saturating_sub(label.chars().count() + 1).max(1));
    postroom_ops::say!("  {label} {dots} {value}");
}

/// A report's lines, every value starting at the same column.
#[derive(Clone, Copy, Debug)]
pub struct Rows {
    /// The column the values start at, as in [`row`].
    pub width: usize,
}

impl Rows {
    /// Print one line: `label`, dots up to the column, then `value`.
    pub fn row(self, label: &str, value: impl std::fmt::Display) {
        row(self.width, label, value);
    }

    /// Print the invariants every run checks (nothing lost, no effect applied twice or out of
    /// order, stock consistent), then the verdict on `failures`.
    pub fn invariants(
        self,
        lost: u64,
        duplicate_effects: u64,
        order_violations: u64,
        stock_consistent: bool,
        failures: &[String],
    ) {
        self.row("lost", lost);
        self.row("duplicate effects", duplicate_effects);
        self.row("out-of-order effects", order_violations);
        self.row("stock consistent", stock_consistent);
        print(failures);
    }
}

/// Counts by name as `name{sep}count` pairs, comma-separated, in name order.
#[must_use]
pub fn counts(by_name: &BTreeMap<String, u64>, sep: &str) -> String {
    by_name
        .iter()
        .map(|(k, v)| format!("{k}{sep}{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Print "all invariants hold" or one line per failed invariant.
pub fn print(failures: &[String]) {
    if failures.is_empty() {
        postroom_ops::say!("all invariants hold");
    } else {
        for f in failures {
            postroom_ops::say!("INVARIANT FAILED: {f}");
        }
    }
}

/// Write `report` as pretty JSON to `path`, when given.
pub fn write_json(path: Option<&Path>, report: &impl Serialize) -> OpsResult {
    let Some(p) = path else { return Ok(()) };
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| OpsError::failed(format!("cannot serialise the report: {e}")))?;
    std::fs::write(p, json)
        .map_err(|e| OpsError::usage(format!("cannot write {}: {e}", p.display())))
}

/// Success when no invariant failed.
pub fn of(failures: &[String]) -> OpsResult {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(OpsError::invariant(format!(
            "{} invariant(s) failed",
            failures.len()
        )))
    }
}
