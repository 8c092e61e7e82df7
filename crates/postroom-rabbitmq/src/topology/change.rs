//! One difference between the desired topology and the broker, as `plan` reports it.

use super::desired::{BindingSpec, ExchangeSpec, QueueSpec};
use crate::management::{BindingInfo, PolicyInfo};
use std::fmt;

/// A change `apply` makes (or, for conflicts, refuses to make).
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Create or replace a policy (TTL, dead-lettering, overflow, delivery limit).
    SetPolicy(PolicyInfo),
    /// Declare a missing exchange.
    CreateExchange(ExchangeSpec),
    /// Declare a missing queue.
    CreateQueue(QueueSpec),
    /// Add a missing binding.
    CreateBinding(BindingSpec),
    /// Remove a binding of a managed queue that the configuration no longer has.
    RemoveBinding(BindingInfo),
    /// Remove a postroom policy the configuration no longer has.
    RemovePolicy(String),
    /// An exchange exists with another type: cannot be changed in place.
    ExchangeConflict {
        /// Name.
        name: String,
        /// What the configuration wants.
        want: String,
        /// What the broker has.
        have: String,
    },
    /// A queue exists with another type or with hard-coded x-arguments: cannot be changed in
    /// place (delete it once drained, or move the messages).
    QueueConflict {
        /// Name.
        name: String,
        /// What the configuration wants.
        want: String,
        /// What the broker has.
        have: String,
    },
    /// A retry stage queue no longer in the ladder. Left alone (it may hold messages); delete
    /// it once it is empty.
    StaleQueue(String),
}

impl Change {
    /// Whether `apply` refuses to proceed while this change is in the plan.
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            Change::ExchangeConflict { .. } | Change::QueueConflict { .. }
        )
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::SetPolicy(p) => write!(
                f,
                "set policy {} on {} = {}",
                p.name,
                p.pattern,
                serde_json::Value::Object(p.definition.clone())
            ),
            Change::CreateExchange(e) => write!(f, "create exchange {} ({})", e.name, e.kind),
            Change::CreateQueue(q) => write!(
                f,
                "create queue {} {}",
                q.name,
                serde_json::Value::Object(q.arguments.clone())
            ),
            Change::CreateBinding(b) => {
                write!(
                    f,
                    "bind {} -> {} with key {:?}",
                    b.source, b.destination, b.key
                )
            }
            Change::RemoveBinding(b) => write!(
                f,
                "unbind {} -> {} with key {:?}",
                b.source, b.destination, b.routing_key
            ),
            Change::RemovePolicy(n) => write!(f, "remove policy {n}"),
            Change::ExchangeConflict { name, want, have } => write!(
                f,
                "CONFLICT exchange {name}: want {want}, broker has {have}"
            ),
            Change::QueueConflict { name, want, have } => {
                write!(f, "CONFLICT queue {name}: want {want}, broker has {have}")
            }
            Change::StaleQueue(n) => write!(
                f,
                "stale retry queue {n} (not in the ladder; delete it once empty)"
            ),
        }
    }
}

impl postroom_core::TopologyChange for Change {
    fn is_conflict(&self) -> bool {
        Change::is_conflict(self)
    }
}
