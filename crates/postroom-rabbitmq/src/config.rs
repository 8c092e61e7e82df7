//! The topology configuration, loadable from TOML.
//!
//! ```toml
//! prefix = "inventory"          # workload prefix: queue names start with it
//! exchange = "orders"           # the work exchange (topic)
//! ladder = "5s,30s,5m"          # one retry queue per stage
//! retry_style = "ack_publish"   # or "reject_dlx"
//! delivery_limit = 8
//! queue_type = "quorum"
//!
//! [[consumers]]
//! name = "orders"
//! bindings = ["order.created"]
//! ```

use postroom_core::config_file::{self, ConsumersSeen};
use postroom_core::{Error, ErrorKind, Result, RetryLadder};
use serde::{Deserialize, Serialize};

/// How a failed delivery gets to its delay stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryStyle {
    /// The consumer publishes a copy (same id, `x-retry-attempt` + 1) to the stage, waits for
    /// the confirm, then acks the original. Walks the whole ladder. The default.
    #[default]
    AckPublish,
    /// The consumer rejects without requeue; the work queue's dead-letter policy moves the
    /// message to the first stage, whose TTL sends it back. A fixed-delay loop; the attempt is
    /// read from the broker's `x-death` count and the loop is bounded by `delivery_limit`.
    RejectDlx,
}

/// Queue type. Only quorum queues give at-least-once dead-lettering, so only they are offered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueType {
    /// Raft-replicated quorum queue.
    #[default]
    Quorum,
}

impl QueueType {
    /// The `x-queue-type` value.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            QueueType::Quorum => "quorum",
        }
    }
}

/// One consumer (one work queue) and the routing keys it takes from the work exchange.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerTopology {
    /// Consumer name (the inbox key and the parking record's owner).
    pub name: String,
    /// Binding keys on the work exchange (topic patterns).
    #[serde(default)]
    pub bindings: Vec<String>,
    /// Partitioned mode when above 0: a consistent-hash exchange on the aggregate key
    /// header in front of this many single-active-consumer queues `<work>.p<i>`, instead of
    /// one work queue. Per-aggregate order holds with any number of consumer processes.
    #[serde(default)]
    pub partitions: u16,
}

/// The whole topology of one workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    /// Workload prefix; queue and exchange names of consumers start with `<prefix>.`.
    #[serde(default)]
    pub prefix: String,
    /// The work exchange (topic).
    #[serde(default = "default_exchange")]
    pub exchange: String,
    /// Virtual host.
    #[serde(default = "default_vhost")]
    pub vhost: String,
    /// Retry delays, e.g. `5s,30s,5m`.
    #[serde(default = "default_ladder", with = "config_file::text")]
    pub ladder: RetryLadder,
    /// Retry style.
    #[serde(default)]
    pub retry_style: RetryStyle,
    /// Quorum `delivery-limit` of the work queues: redeliveries beyond it are dead-lettered.
    #[serde(default = "default_delivery_limit")]
    pub delivery_limit: u32,
    /// Queue type.
    #[serde(default)]
    pub queue_type: QueueType,
    /// Priority of postroom's policies (RabbitMQ applies only the highest-priority match).
    #[serde(default = "default_priority")]
    pub policy_priority: i64,
    /// Consumers.
    #[serde(default)]
    pub consumers: Vec<ConsumerTopology>,
}

fn default_exchange() -> String {
    "orders".into()
}
fn default_vhost() -> String {
    "/".into()
}
fn default_ladder() -> RetryLadder {
    RetryLadder::default()
}
fn default_delivery_limit() -> u32 {
    8
}
fn default_priority() -> i64 {
    10
}

impl Default for TopologyConfig {
    fn default() -> Self {
        Self {
            prefix: String::new(),
            exchange: default_exchange(),
            vhost: default_vhost(),
            ladder: default_ladder(),
            retry_style: RetryStyle::default(),
            delivery_limit: default_delivery_limit(),
            queue_type: QueueType::default(),
            policy_priority: default_priority(),
            consumers: Vec::new(),
        }
    }
}

impl TopologyConfig {
    /// Parse from TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        config_file::parse_checked("topology config", toml::from_str(text), Self::validate)
    }

    /// Check names and limits: what the broker can carry (names and routing keys of at most
    /// 255 bytes, stage delays within a message TTL) and a topology of bounded size.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::new(ErrorKind::Config, m));
        if self.exchange.is_empty() {
            return bad("the work exchange name is empty".into());
        }
        if self.delivery_limit == 0 {
            return bad("delivery_limit must be at least 1".into());
        }
        limits::check(self)?;
        let mut seen = ConsumersSeen::new();
        for c in &self.consumers {
            if c.name.is_empty()
                || !c
                    .name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch))
            {
                return bad(format!(
                    "consumer name {:?} must be non-empty and use only [A-Za-z0-9._-]",
                    c.name
                ));
            }
            seen.note(&c.name)?;
        }
        // Every queue and exchange has one owner: consumer `a.parking`'s work queue would be
        // consumer `a`'s parking queue, `a.retry.5s`'s its first stage.
        let desired = crate::topology::desired::DesiredTopology::of(self);
        let queues = desired.queues.iter().map(|q| ("queue", &q.name));
        let exchanges = desired.exchanges.iter().map(|e| ("exchange", &e.name));
        let mut named = std::collections::HashSet::new();
        for (what, name) in queues.chain(exchanges) {
            if !named.insert((what, name)) {
                return bad(format!(
                    "the {what} {name:?} would be declared twice: two consumers' names lead to it (a consumer owns <prefix>.<name> and its .retry.<delay>, .parking, .p<i> queues and .retry, .dlx exchanges), or the work exchange has a consumer's exchange name; rename one"
                ));
            }
        }
        Ok(())
    }

    /// Add a consumer (or replace the bindings of one with the same name).
    #[must_use]
    pub fn with_consumer(mut self, name: impl Into<String>, bindings: &[&str]) -> Self {
        let name = name.into();
        let bindings = bindings.iter().map(|s| (*s).to_string()).collect();
        self.consumers.retain(|c| c.name != name);
        self.consumers.push(ConsumerTopology {
            name,
            bindings,
            partitions: 0,
        });
        self
    }

    /// Make `consumer` (already added) partitioned over `partitions` queues.
    #[must_use]
    pub fn partitioned(mut self, consumer: &str, partitions: u16) -> Self {
        for c in self.consumers.iter_mut().filter(|c| c.name == consumer) {
            c.partitions = partitions;
        }
        self
    }

    /// The names of one consumer's queues and exchanges.
    #[must_use]
    pub fn names(&self, consumer: &str) -> crate::ConsumerNames {
        crate::ConsumerNames::new(&self.prefix, consumer)
    }
}

mod limits;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_from_toml_with_defaults() {
        let cfg = TopologyConfig::from_toml(
            "prefix = \"inventory\"\nladder = \"1s,2s\"\nretry_style = \"reject_dlx\"\n[[consumers]]\nname = \"orders\"\nbindings = [\"order.*\"]\n",
        )
        .unwrap();
        assert_eq!(cfg.exchange, "orders");
        assert_eq!(cfg.ladder.to_string(), "1s,2s");
        assert_eq!(cfg.retry_style, RetryStyle::RejectDlx);
        assert_eq!(cfg.delivery_limit, 8);
        assert_eq!(cfg.consumers[0].bindings, vec!["order.*".to_string()]);
        assert!(TopologyConfig::from_toml("queue_type = \"classic\"").is_err());
        assert!(TopologyConfig::from_toml("[[consumers]]\nname = \"a b\"").is_err());
    }
}
