//! The topology configuration, loadable from TOML.
//!
//! ```toml
//! prefix = "shop"               # queue names start with it: shop-inventory, shop-inventory-dlq
//! fifo = false                  # FIFO queues (.fifo): order within a message group
//! visibility_timeout = "30s"    # how long a receive hides a message
//! retention = "4d"              # the work queues' message retention
//! dlq_retention = "14d"         # the DLQs' (longer: a standard DLQ keeps the original enqueue time)
//! max_receive_count = 10        # receives before SQS moves a message to the DLQ by itself
//! extend_visibility = true      # a heartbeat keeps a message hidden while its handler runs
//!
//! [[consumers]]
//! name = "inventory"
//! bindings = ["order.created"]
//! ```

use crate::naming::QueueNames;
use postroom_core::config_file::{self, ConsumersSeen};
use postroom_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// SQS's largest message (body and attributes), and the largest `SendMessageBatch` request.
pub const SQS_MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// SQS's longest visibility timeout, counted from a receive.
pub const SQS_MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);
/// SQS's retention bounds.
const MIN_RETENTION: Duration = Duration::from_secs(60);
const MAX_RETENTION: Duration = Duration::from_secs(14 * 24 * 3600);

/// One consumer: its work queue, its DLQ, and the topic patterns routed to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerTopology {
    /// Consumer name (the inbox key, the parking record's owner, part of the queue names).
    pub name: String,
    /// Topic patterns (`*` one word, `#` any number) whose publishes this consumer receives.
    #[serde(default)]
    pub bindings: Vec<String>,
}

/// The whole topology of one workload on SQS.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    /// Queue name prefix (`<prefix>-<consumer>`); may be empty.
    #[serde(default)]
    pub prefix: String,
    /// FIFO queues: one message group per aggregate, in order; deduplication by message id.
    #[serde(default)]
    pub fifo: bool,
    /// How long a receive hides a message from other consumers.
    #[serde(default = "default_visibility", with = "duration_text")]
    pub visibility_timeout: Duration,
    /// How long the work queues keep a message.
    #[serde(default = "default_retention", with = "duration_text")]
    pub retention: Duration,
    /// How long the DLQs keep a message; longer than `retention`, since a message moved to a
    /// standard DLQ keeps its original enqueue time.
    #[serde(default = "default_dlq_retention", with = "duration_text")]
    pub dlq_retention: Duration,
    /// Receives after which SQS moves a message to the DLQ by itself (the crash-loop bound).
    #[serde(default = "default_max_receive_count")]
    pub max_receive_count: u32,
    /// The queues' largest message, body and attributes together.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// Keep a message hidden while its handler runs (a heartbeat per unsettled delivery).
    /// Without it a handler slower than the visibility timeout loses its message to another
    /// consumer (the inbox absorbs the duplicate).
    #[serde(default = "default_true")]
    pub extend_visibility: bool,
    /// Consumers.
    #[serde(default)]
    pub consumers: Vec<ConsumerTopology>,
}

fn default_visibility() -> Duration {
    Duration::from_secs(30)
}
fn default_retention() -> Duration {
    Duration::from_secs(4 * 24 * 3600)
}
fn default_dlq_retention() -> Duration {
    MAX_RETENTION
}
fn default_max_receive_count() -> u32 {
    10
}
fn default_max_message_bytes() -> usize {
    SQS_MAX_MESSAGE_BYTES
}
fn default_true() -> bool {
    true
}

impl Default for TopologyConfig {
    fn default() -> Self {
        Self {
            prefix: String::new(),
            fifo: false,
            visibility_timeout: default_visibility(),
            retention: default_retention(),
            dlq_retention: default_dlq_retention(),
            max_receive_count: default_max_receive_count(),
            max_message_bytes: default_max_message_bytes(),
            extend_visibility: true,
            consumers: Vec::new(),
        }
    }
}

impl TopologyConfig {
    /// Parse from TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        config_file::parse_checked("SQS topology config", toml::from_str(text), Self::validate)
    }

    /// Check names and SQS's limits.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::new(ErrorKind::Config, m));
        if self.visibility_timeout < Duration::from_secs(1)
            || self.visibility_timeout > SQS_MAX_VISIBILITY
            || self.visibility_timeout.subsec_nanos() != 0
        {
            return bad(format!(
                "visibility_timeout must be whole seconds between 1 s and 12 h, got {:?}",
                self.visibility_timeout
            ));
        }
        for (what, d) in [
            ("retention", self.retention),
            ("dlq_retention", self.dlq_retention),
        ] {
            if d < MIN_RETENTION || d > MAX_RETENTION {
                return bad(format!(
                    "{what} must be between 60 s and 14 days, got {d:?}"
                ));
            }
        }
        if self.dlq_retention <= self.retention {
            return bad(format!(
                "dlq_retention ({:?}) must be longer than retention ({:?}): a message moved to a standard DLQ keeps its original enqueue time, so an equal retention could expire it as soon as it arrives",
                self.dlq_retention, self.retention
            ));
        }
        if !(1..=1000).contains(&self.max_receive_count) {
            return bad(format!(
                "max_receive_count must be between 1 and 1000, got {}",
                self.max_receive_count
            ));
        }
        if !(1024..=SQS_MAX_MESSAGE_BYTES).contains(&self.max_message_bytes) {
            return bad(format!(
                "max_message_bytes must be between 1024 and {SQS_MAX_MESSAGE_BYTES}, got {}",
                self.max_message_bytes
            ));
        }
        let mut seen = ConsumersSeen::new();
        // Every queue has one owner: consumer `a-dlq`'s work queue would be `a`'s DLQ.
        let mut owners: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
        for c in &self.consumers {
            let names = QueueNames::new(&self.prefix, &c.name, self.fifo)?;
            seen.note(&c.name)?;
            for queue in [names.work, names.dlq] {
                if let Some(other) = owners.insert(queue.clone(), &c.name) {
                    return bad(format!(
                        "consumers {other:?} and {:?} would share the queue {queue:?} (a consumer owns <prefix>-<name> and <prefix>-<name>-dlq): rename one",
                        c.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Add a consumer (or replace the bindings of one with the same name).
    #[must_use]
    pub fn with_consumer(mut self, name: impl Into<String>, bindings: &[&str]) -> Self {
        let name = name.into();
        self.consumers.retain(|c| c.name != name);
        self.consumers.push(ConsumerTopology {
            name,
            bindings: bindings.iter().map(|s| (*s).to_string()).collect(),
        });
        self
    }

    /// The queue names of `consumer`.
    pub fn names(&self, consumer: &str) -> Result<QueueNames> {
        QueueNames::new(&self.prefix, consumer, self.fifo)
    }
}

/// Durations as text the way every topology file writes them, and read in days (`4d`) too.
mod duration_text {
    pub use postroom_core::config_file::duration_text::serialize;
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    /// `30s`, `5m`, `4d` (days), or a number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        if let Some(days) = text.trim().strip_suffix('d') {
            let n: u64 = days.parse().map_err(serde::de::Error::custom)?;
            return n
                .checked_mul(24 * 3600)
                .map(Duration::from_secs)
                .ok_or_else(|| serde::de::Error::custom(format!("duration {text:?} is too long")));
        }
        postroom_core::retry::ladder::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_from_toml_with_defaults_and_checks_limits() {
        let cfg = TopologyConfig::from_toml(
            "prefix = \"shop\"\nfifo = true\nvisibility_timeout = \"10s\"\nretention = \"1d\"\n[[consumers]]\nname = \"inventory\"\nbindings = [\"order.*\"]\n",
        )
        .unwrap();
        assert!(cfg.fifo);
        assert_eq!(cfg.visibility_timeout, Duration::from_secs(10));
        assert_eq!(cfg.retention, Duration::from_secs(86_400));
        assert_eq!(cfg.dlq_retention, MAX_RETENTION);
        assert_eq!(cfg.max_receive_count, 10);
        assert_eq!(cfg.names("inventory").unwrap().work, "shop-inventory.fifo");
        let err = TopologyConfig::from_toml("retention = \"14d\"").unwrap_err();
        assert!(err.to_string().contains("longer than retention"), "{err}");
        assert!(TopologyConfig::from_toml("max_receive_count = 0").is_err());
        assert!(TopologyConfig::from_toml("visibility_timeout = \"1500ms\"").is_err());
        assert!(TopologyConfig::from_toml("[[consumers]]\nname = \"a b\"").is_err());
        assert!(TopologyConfig::from_toml("colour = 1").is_err());
    }

    #[test]
    fn a_retention_in_days_too_long_to_count_is_refused_not_a_panic() {
        let err = TopologyConfig::from_toml("retention = \"999999999999999999d\"").unwrap_err();
        assert!(err.to_string().contains("too long"), "{err}");
    }
}
