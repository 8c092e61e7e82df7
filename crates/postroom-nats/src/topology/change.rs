//! One difference between the desired topology and the server, as `plan` reports it.

use super::desired::ConsumerSpec;
use super::wire::StreamConfig;
use std::fmt;

/// A change `apply` makes (or, for conflicts, refuses to make).
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Create a missing stream.
    CreateStream(StreamConfig),
    /// Update a stream's subjects or limits.
    UpdateStream {
        /// The configuration wanted.
        want: StreamConfig,
        /// What differs, in words.
        differs: Vec<String>,
    },
    /// Create a missing durable.
    CreateConsumer(ConsumerSpec),
    /// Update a durable's limits (ack wait, deliveries, pending, backoff).
    UpdateConsumer {
        /// The configuration wanted.
        want: ConsumerSpec,
        /// What differs, in words.
        differs: Vec<String>,
    },
    /// Something the server cannot change in place (a stream's storage or retention, a
    /// durable's filter or policies): refused; move the data and delete it first.
    Conflict {
        /// Stream or `stream/durable`.
        name: String,
        /// What differs, in words.
        differs: Vec<String>,
    },
}

impl Change {
    /// Whether `apply` refuses to proceed while this change is in the plan.
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, Change::Conflict { .. })
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::CreateStream(s) => {
                write!(f, "create stream {} ({})", s.name, s.subjects.join(", "))
            }
            Change::UpdateStream { want, differs } => {
                write!(f, "update stream {}: {}", want.name, differs.join("; "))
            }
            Change::CreateConsumer(c) => write!(
                f,
                "create durable {}/{} (filter {:?})",
                c.stream, c.config.durable_name, c.config.filter_subject
            ),
            Change::UpdateConsumer { want, differs } => write!(
                f,
                "update durable {}/{}: {}",
                want.stream,
                want.config.durable_name,
                differs.join("; ")
            ),
            Change::Conflict { name, differs } => write!(
                f,
                "CONFLICT {name}: {} (cannot be changed in place; refused)",
                differs.join("; ")
            ),
        }
    }
}

impl postroom_core::TopologyChange for Change {
    fn is_conflict(&self) -> bool {
        Change::is_conflict(self)
    }
}
