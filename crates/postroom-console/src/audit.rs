//! The audit: every state change made through the console is appended with who, when, what
//! and on which thing, and counted in the console's metrics.
//!
//! What one entry may hold is bounded: the actor and the target are cut short (a typed user
//! name can be anything), and payload values in a detail (an edit's old and new values) are
//! cut at [`MAX_VALUE_CHARS`]. Payload values live under a `diff` key of the detail, and
//! only roles allowed to see payloads see them ([`visible_detail`]); others see which paths
//! changed.

use crate::backend::ParkingConsole;
use crate::metrics as cm;
use chrono::Utc;
use postroom_core::message::truncate;
use postroom_core::{AuditEntry, Result};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The most characters of an actor kept.
pub const MAX_ACTOR_CHARS: usize = 64;
/// The most characters of a target kept.
pub const MAX_TARGET_CHARS: usize = 256;
/// The most characters of one payload value kept in an edit's diff.
pub const MAX_VALUE_CHARS: usize = 4096;

/// The key of a detail whose entries carry payload values (`{path, before, after}`).
pub const DIFF: &str = "diff";

/// Appends audit entries.
#[derive(Clone)]
pub struct Auditor {
    backend: Arc<dyn ParkingConsole>,
}

impl Auditor {
    /// Appending to `backend`'s audit.
    pub fn new(backend: Arc<dyn ParkingConsole>) -> Self {
        Self { backend }
    }

    /// Record that `actor` did `action` on `target`, with `detail` (actor and target cut
    /// short).
    pub async fn record(
        &self,
        actor: &str,
        action: &str,
        target: &str,
        detail: serde_json::Value,
    ) -> Result<()> {
        let entry = AuditEntry {
            id: 0,
            at: Utc::now(),
            actor: truncate(actor, MAX_ACTOR_CHARS),
            action: action.to_string(),
            target: truncate(target, MAX_TARGET_CHARS),
            detail,
        };
        self.backend.lot().append_audit(&entry).await?;
        metrics::counter!(cm::AUDIT_EVENTS, "action" => action.to_string()).increment(1);
        tracing::info!(actor = %entry.actor, action, target = %entry.target, "audited");
        Ok(())
    }
}

/// `detail` as a reader may see it: whole when `payloads` (the role may see payloads), else
/// with every `diff` entry reduced to its path.
#[must_use]
pub fn visible_detail(detail: &Value, payloads: bool) -> Value {
    if payloads {
        return detail.clone();
    }
    match detail {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = if k == DIFF {
                        paths_only(v)
                    } else {
                        visible_detail(v, false)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| visible_detail(v, false)).collect()),
        other => other.clone(),
    }
}

fn paths_only(diff: &Value) -> Value {
    match diff {
        Value::Array(entries) => Value::Array(
            entries
                .iter()
                .map(|e| {
                    let mut m = Map::new();
                    m.insert("path".into(), e.get("path").cloned().unwrap_or(Value::Null));
                    m.insert("values".into(), "hidden".into());
                    Value::Object(m)
                })
                .collect(),
        ),
        _ => Value::String("hidden".into()),
    }
}

/// A payload value for a diff: as it is, or, when its text is longer than
/// [`MAX_VALUE_CHARS`], that text cut short.
#[must_use]
pub fn bounded_value(v: Option<&Value>) -> Value {
    let Some(v) = v else {
        return Value::Null;
    };
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() <= MAX_VALUE_CHARS {
        v.clone()
    } else {
        Value::String(format!(
            "{} ({} bytes in all)",
            truncate(&text, MAX_VALUE_CHARS),
            text.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn readers_without_payloads_see_the_paths_of_a_diff_only() {
        let detail = json!({"selected": 1, "edit": {"message": "m", "diff": [
            {"path": "/data/email", "before": "a@x", "after": "b@x"}
        ]}});
        assert_eq!(visible_detail(&detail, true), detail);
        assert_eq!(
            visible_detail(&detail, false),
            json!({"selected": 1, "edit": {"message": "m", "diff": [
                {"path": "/data/email", "values": "hidden"}
            ]}})
        );
        assert_eq!(
            visible_detail(&json!({"diff": "x"}), false),
            json!({"diff": "hidden"})
        );
    }

    #[test]
    fn long_values_are_cut_short() {
        let long = "x".repeat(MAX_VALUE_CHARS + 1000);
        let v = bounded_value(Some(&Value::String(long.clone())));
        assert!(v.as_str().unwrap().len() < long.len());
        assert!(v.as_str().unwrap().ends_with("bytes in all)"));
        assert_eq!(bounded_value(Some(&json!(5))), json!(5));
        assert_eq!(bounded_value(None), Value::Null);
    }
}
