//! How a run ends: its report printed and written as JSON, and a failure when an invariant
//! did not hold.

use postroom_ops::{OpsError, OpsResult};
use serde::Serialize;
use std::path::Path;

/// Print one report line: `label` and dots up to column `width`, then `value`.
pub fn row(width: usize, label: &str, value: impl std::fmt::Display) {
    let dots = ".".repeat(width.saturating_sub(label.chars().count() + 1).max(1));
    println!("  {label} {dots} {value}");
}

/// Print "all invariants hold" or one line per failed invariant.
pub fn print(failures: &[String]) {
    if failures.is_empty() {
        println!("all invariants hold");
    } else {
        for f in failures {
            println!("INVARIANT FAILED: {f}");
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
