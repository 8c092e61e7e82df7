//! The audit: every state change made through the console is appended with who, when, what
//! and on which thing, and counted in the console's metrics.

use crate::backend::ParkingConsole;
use crate::metrics as cm;
use chrono::Utc;
use postroom_core::{AuditEntry, Result};
use std::sync::Arc;

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

    /// Record that `actor` did `action` on `target`, with `detail`.
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
            actor: actor.to_string(),
            action: action.to_string(),
            target: target.to_string(),
            detail,
        };
        self.backend.lot().append_audit(&entry).await?;
        metrics::counter!(cm::AUDIT_EVENTS, "action" => action.to_string()).increment(1);
        tracing::info!(actor, action, target, "audited");
        Ok(())
    }
}
