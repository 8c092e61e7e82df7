//! What `plan` finds to do, and `apply` does: create a queue, or set one attribute of an
//! existing queue to the value the configuration asks for.

use std::collections::BTreeMap;
use std::fmt;

/// One change to the queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Create a queue with these attributes.
    CreateQueue {
        /// Queue name.
        name: String,
        /// SQS attribute name → value.
        attributes: BTreeMap<String, String>,
    },
    /// Set an attribute of an existing queue.
    SetAttribute {
        /// Queue name.
        queue: String,
        /// SQS attribute name.
        attribute: String,
        /// Its value now (empty when unset).
        from: String,
        /// The value asked for.
        to: String,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::CreateQueue { name, attributes } => {
                let attrs: Vec<String> =
                    attributes.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "create queue {name} ({})", attrs.join(", "))
            }
            Change::SetAttribute {
                queue,
                attribute,
                from,
                to,
            } => write!(f, "set {attribute} of queue {queue}: {from:?} -> {to:?}"),
        }
    }
}

/// Whether two `RedrivePolicy` values say the same thing (SQS returns `maxReceiveCount` as a
/// number or as text, and may order the keys its own way).
#[must_use]
pub fn same_redrive_policy(a: &str, b: &str) -> bool {
    let read = |s: &str| -> Option<(String, String)> {
        let v: serde_json::Value = serde_json::from_str(s).ok()?;
        let arn = v.get("deadLetterTargetArn")?.as_str()?.to_string();
        let count = match v.get("maxReceiveCount")? {
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::String(s) => s.clone(),
            _ => return None,
        };
        Some((arn, count))
    };
    match (read(a), read(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

impl postroom_core::TopologyChange for Change {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redrive_policies_compare_by_meaning() {
        assert!(same_redrive_policy(
            r#"{"deadLetterTargetArn": "arn:a", "maxReceiveCount": 5}"#,
            r#"{"maxReceiveCount":"5","deadLetterTargetArn":"arn:a"}"#
        ));
        assert!(!same_redrive_policy(
            r#"{"deadLetterTargetArn": "arn:a", "maxReceiveCount": 5}"#,
            r#"{"deadLetterTargetArn": "arn:a", "maxReceiveCount": 6}"#
        ));
        assert!(!same_redrive_policy(
            "",
            r#"{"deadLetterTargetArn": "arn:a", "maxReceiveCount": 6}"#
        ));
    }
}
