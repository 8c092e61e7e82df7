//! What an operations console keeps beside the parking lot, as data every store writes the
//! same way: listing queries with full text over the error message and archived copies,
//! light summaries for grouping, archive entries, the live state of redrive runs driven from a
//! console, and the audit of every state change.

use super::{ParkedMessage, ParkedStatus, ParkingFilter};
use crate::envelope::MessageId;
use crate::error::ErrorClass;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A listing: a [`ParkingFilter`] plus full text over the error message and the archive.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ParkingQuery {
    /// The selection.
    pub filter: ParkingFilter,
    /// Words that must all appear in the error message (ASCII case ignored).
    pub text: Option<String>,
    /// List archived copies instead of live ones.
    pub archived: bool,
}

impl ParkingQuery {
    /// The words of [`ParkingQuery::text`], lower-cased (ASCII).
    #[must_use]
    pub fn words(&self) -> Vec<String> {
        self.text
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_ascii_lowercase)
            .collect()
    }

    /// Whether `m`, archived or not, matches (the semantics every store's SQL must equal).
    #[must_use]
    pub fn matches(&self, m: &ParkedMessage, archived: bool) -> bool {
        let lower = m.error_message.to_ascii_lowercase();
        self.filter.matches(m)
            && archived == self.archived
            && self.words().iter().all(|w| lower.contains(w.as_str()))
    }
}

/// A parked copy without headers and body: what grouping and listings need.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParkedSummary {
    /// Stable id.
    pub message_id: MessageId,
    /// The consumer that parked it.
    pub consumer: String,
    /// Message type, when known.
    pub message_type: Option<String>,
    /// Class of the last error.
    pub error_class: ErrorClass,
    /// Code of the last error.
    pub error_code: String,
    /// Text of the last error.
    pub error_message: String,
    /// When it was parked.
    pub parked_at: DateTime<Utc>,
    /// Parked or redriven.
    pub status: ParkedStatus,
}

impl From<&ParkedMessage> for ParkedSummary {
    fn from(m: &ParkedMessage) -> Self {
        Self {
            message_id: m.message_id,
            consumer: m.consumer.clone(),
            message_type: m.message_type.clone(),
            error_class: m.error_class,
            error_code: m.error_code.clone(),
            error_message: m.error_message.clone(),
            parked_at: m.parked_at,
            status: m.status,
        }
    }
}

/// One audited state change: who did what to which thing, with the details (a selection, a
/// count, a diff) as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Position in the log (0 before it is stored).
    pub id: i64,
    /// When.
    pub at: DateTime<Utc>,
    /// Who (a user name).
    pub actor: String,
    /// What: `redrive.start`, `redrive.pause`, `archive`, `purge`, `edit_redrive`, `login`, …
    pub action: String,
    /// Which thing: a run id, a message id, a group.
    pub target: String,
    /// Details.
    pub detail: serde_json::Value,
}

/// State of a redrive run driven from a console.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Sending messages back.
    Running,
    /// Stopped by an operator; resumes where it stopped.
    Paused,
    /// Stopped for good by an operator (what was sent stays sent).
    Cancelled,
    /// Every selected message was sent back.
    Finished,
    /// Stopped by an error; may be resumed.
    Failed,
}

crate::stable_names!(RunState, "redrive run state" {
    Running => "running",
    Paused => "paused",
    Cancelled => "cancelled",
    Finished => "finished",
    Failed => "failed",
});

impl RunState {
    /// Whether the run can no longer change.
    #[must_use]
    pub fn is_final(&self) -> bool {
        match self {
            RunState::Cancelled | RunState::Finished => true,
            RunState::Running | RunState::Paused | RunState::Failed => false,
        }
    }
}

/// How a console drives a redrive run: its rate, state, the group it redrives (if any), and
/// how many messages joined that group while it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunControl {
    /// The redrive run (see [`super::RedriveRun`]).
    pub run_id: String,
    /// State.
    pub state: RunState,
    /// Messages per second.
    pub rate: f64,
    /// The failure group redriven, when the run redrives one.
    pub group_key: Option<String>,
    /// Who started it.
    pub started_by: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Messages that joined the group after the run selected it.
    pub joined: u64,
    /// The error that stopped it, if one did.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_states_round_trip() {
        for s in [
            RunState::Running,
            RunState::Paused,
            RunState::Cancelled,
            RunState::Finished,
            RunState::Failed,
        ] {
            assert_eq!(s.as_str().parse::<RunState>(), Ok(s));
        }
        assert!("bogus".parse::<RunState>().is_err());
    }
}
