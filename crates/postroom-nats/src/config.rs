//! The topology configuration of one workload on JetStream, loadable from TOML.
//!
//! ```toml
//! prefix = "shop"            # subjects <prefix>.<topic>; stream names start with it
//! ack_wait = "30s"           # how long a delivery is owned without a Progress heartbeat
//! max_deliver = 10           # the crash-loop bound the server keeps
//! max_ack_pending = 10000    # delayed naks stay pending: size it for them
//! backoff = []               # ack-wait expiries (optional; first = ack_wait, non-decreasing)
//! max_delay = "1h"           # longest delayed nak a consumer may ask for
//! duplicate_window = "2m"    # Nats-Msg-Id deduplication window of the work stream
//!
//! [[consumers]]
//! name = "inventory"
//! routes = ["order.created", "order.*"]
//! partitions = 0             # > 0: per-key order over this many partitions
//! ```

use postroom_core::config_file::{self, ConsumersSeen};
use postroom_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One consumer and the topics it takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerTopology {
    /// Consumer name: the inbox key, the parking record's owner, the durable names' stem.
    pub name: String,
    /// Topic patterns, AMQP style (`*` one word, `#` any number).
    #[serde(default)]
    pub routes: Vec<String>,
    /// Per-key order when above 0: copies are spread over this many partition subjects by
    /// their aggregate key, and each partition's durable hands out one copy at a time.
    #[serde(default)]
    pub partitions: u16,
}

/// Where JetStream keeps the streams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Storage {
    /// On disk (survives a server restart).
    #[default]
    File,
    /// In memory.
    Memory,
}

/// The topology of one workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// Workload prefix: topic subjects are `<prefix>.<topic>`, the work stream is named
    /// after it. `[A-Za-z0-9_-]`, not starting with `_`.
    pub prefix: String,
    /// Ownership of a delivery without a Progress heartbeat.
    #[serde(default = "d_ack_wait", with = "config_file::duration_text")]
    pub ack_wait: Duration,
    /// Deliveries of one copy the server makes (the crash-loop bound it keeps); must exceed
    /// the backoff list's length.
    #[serde(default = "d_max_deliver")]
    pub max_deliver: u32,
    /// Unsettled copies a durable may have, delayed naks included.
    #[serde(default = "d_max_ack_pending")]
    pub max_ack_pending: u32,
    /// Redelivery delays after ack-wait expiries (a consumer that died or hung). Optional;
    /// when set its first entry must equal `ack_wait` (the server makes it so) and it must
    /// not decrease (a shorter later entry would shorten a delayed nak).
    #[serde(default, with = "text_list")]
    pub backoff: Vec<Duration>,
    /// Longest delay a delayed nak may carry (the transport's delay capability).
    #[serde(default = "d_max_delay", with = "config_file::duration_text")]
    pub max_delay: Duration,
    /// Deduplication window of the work stream (`Nats-Msg-Id`): a relay that republishes
    /// within it leaves one copy.
    #[serde(default = "d_duplicate_window", with = "config_file::duration_text")]
    pub duplicate_window: Duration,
    /// Publish with `Nats-Msg-Id` = the message id (the default). Off, every publish is a new
    /// copy even within the window: only for tests that need a duplicate to reach a consumer.
    #[serde(default = "d_true")]
    pub deduplicate: bool,
    /// How long the work stream keeps copies (0: no limit).
    #[serde(default = "d_max_age", with = "config_file::duration_text")]
    pub max_age: Duration,
    /// How long parking streams keep copies the ingest has not stored (0: no limit).
    #[serde(default = "d_parking_max_age", with = "config_file::duration_text")]
    pub parking_max_age: Duration,
    /// File or memory storage.
    #[serde(default)]
    pub storage: Storage,
    /// Stream replicas.
    #[serde(default = "d_replicas")]
    pub replicas: usize,
    /// How long one pull request waits on the server before it is renewed.
    #[serde(default = "d_pull_expires", with = "config_file::duration_text")]
    pub pull_expires: Duration,
    /// Idle heartbeat of pull requests: two missed in a row mean the request or the server
    /// is gone, and the subscriber recovers.
    #[serde(default = "d_heartbeat", with = "config_file::duration_text")]
    pub heartbeat: Duration,
    /// Progress heartbeats keep an unsettled delivery owned at most this long; a handler that
    /// hangs past it loses the delivery to a redelivery (the crash-loop bound counts it).
    #[serde(default = "d_max_in_progress", with = "config_file::duration_text")]
    pub max_in_progress: Duration,
    /// Consumers.
    #[serde(default)]
    pub consumers: Vec<ConsumerTopology>,
    /// The workload's partition count when this configuration was reduced to one consumer
    /// (the subjects of every consumer carry the partition word if any consumer is
    /// partitioned).
    #[serde(skip)]
    workload_partitions: Option<u16>,
}

fn d_ack_wait() -> Duration {
    Duration::from_secs(30)
}
fn d_max_deliver() -> u32 {
    10
}
fn d_max_ack_pending() -> u32 {
    10_000
}
fn d_max_delay() -> Duration {
    Duration::from_secs(3600)
}
fn d_duplicate_window() -> Duration {
    Duration::from_secs(120)
}
fn d_true() -> bool {
    true
}
fn d_max_age() -> Duration {
    Duration::from_secs(7 * 24 * 3600)
}
fn d_parking_max_age() -> Duration {
    Duration::from_secs(30 * 24 * 3600)
}
fn d_replicas() -> usize {
    1
}
fn d_pull_expires() -> Duration {
    Duration::from_secs(10)
}
fn d_heartbeat() -> Duration {
    Duration::from_secs(2)
}
fn d_max_in_progress() -> Duration {
    Duration::from_secs(15 * 60)
}

impl NatsConfig {
    /// A workload with this prefix and defaults for everything else.
    #[must_use]
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            ack_wait: d_ack_wait(),
            max_deliver: d_max_deliver(),
            max_ack_pending: d_max_ack_pending(),
            backoff: Vec::new(),
            max_delay: d_max_delay(),
            duplicate_window: d_duplicate_window(),
            deduplicate: true,
            max_age: d_max_age(),
            parking_max_age: d_parking_max_age(),
            storage: Storage::File,
            replicas: d_replicas(),
            pull_expires: d_pull_expires(),
            heartbeat: d_heartbeat(),
            max_in_progress: d_max_in_progress(),
            consumers: Vec::new(),
            workload_partitions: None,
        }
    }

    /// Parse from TOML text and validate.
    pub fn from_toml(text: &str) -> Result<Self> {
        config_file::parse_checked("NATS topology config", toml::from_str(text), Self::validate)
    }

    /// Add a consumer on `routes` (or replace the routes of one with the same name).
    #[must_use]
    pub fn with_consumer(mut self, name: impl Into<String>, routes: &[&str]) -> Self {
        let name = name.into();
        let partitions = self
            .consumer(&name)
            .map_or(0, |c: &ConsumerTopology| c.partitions);
        self.consumers.retain(|c| c.name != name);
        self.consumers.push(ConsumerTopology {
            name,
            routes: routes.iter().map(|r| (*r).to_string()).collect(),
            partitions,
        });
        self
    }

    /// Make `consumer` (already added) partitioned over `partitions` subjects.
    #[must_use]
    pub fn partitioned(mut self, consumer: &str, partitions: u16) -> Self {
        for c in self.consumers.iter_mut().filter(|c| c.name == consumer) {
            c.partitions = partitions;
        }
        self
    }

    /// The consumer named `name`.
    #[must_use]
    pub fn consumer(&self, name: &str) -> Option<&ConsumerTopology> {
        self.consumers.iter().find(|c| c.name == name)
    }

    /// The workload reduced to one consumer (what binding that consumer needs).
    #[must_use]
    pub fn only(&self, consumer: &str) -> Self {
        let mut c = self.clone();
        c.workload_partitions = Some(self.partitions());
        c.consumers.retain(|x| x.name == consumer);
        c
    }

    /// The largest partition count of any consumer: topic subjects carry a partition word
    /// when it is above 0.
    #[must_use]
    pub fn partitions(&self) -> u16 {
        let own = self
            .consumers
            .iter()
            .map(|c| c.partitions)
            .max()
            .unwrap_or(0);
        own.max(self.workload_partitions.unwrap_or(0))
    }

    /// Check names and limits; every message names what to change.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::new(ErrorKind::Config, m));
        if !valid_name(&self.prefix) || self.prefix.starts_with('_') {
            return bad(format!(
                "NATS prefix {:?} must be non-empty, use only [A-Za-z0-9_-] and not start with '_' (it names the work stream and starts every topic subject)",
                self.prefix
            ));
        }
        if self.prefix.len() > MAX_NAME_LEN {
            return bad(format!(
                "the NATS prefix is {} characters long; it names the work stream, and the server takes at most {MAX_NAME_LEN}",
                self.prefix.len()
            ));
        }
        if self.max_deliver < 2 {
            return bad("max_deliver must be at least 2 (one delivery and one retry)".into());
        }
        if self.max_deliver as usize <= self.backoff.len() {
            return bad(format!(
                "max_deliver ({}) must be larger than the backoff list ({} entries): NATS 2.9 refuses the consumer otherwise",
                self.max_deliver,
                self.backoff.len()
            ));
        }
        if let Some(first) = self.backoff.first()
            && *first != self.ack_wait
        {
            return bad(format!(
                "the first backoff entry ({first:?}) must equal ack_wait ({:?}): the server replaces ack_wait with it",
                self.ack_wait
            ));
        }
        if self.backoff.windows(2).any(|w| w[1] < w[0]) {
            return bad("backoff entries must not decrease: the server measures a delayed nak against the backoff entry of its delivery, so a shorter later entry would redeliver before the delay".into());
        }
        if self.duplicate_window < Duration::from_millis(100) {
            return bad("duplicate_window must be at least 100ms (the server's minimum)".into());
        }
        if self.max_ack_pending == 0 {
            return bad("max_ack_pending must be at least 1".into());
        }
        if self.ack_wait < Duration::from_millis(500) {
            return bad("ack_wait must be at least 500ms".into());
        }
        if self.heartbeat.is_zero() || self.pull_expires < self.heartbeat * 2 {
            return bad(format!(
                "pull_expires ({:?}) must be at least twice the heartbeat ({:?})",
                self.pull_expires, self.heartbeat
            ));
        }
        let mut seen = ConsumersSeen::new();
        for c in &self.consumers {
            if !valid_name(&c.name) || c.name.contains("__") {
                return bad(format!(
                    "consumer name {:?} must be non-empty, use only [A-Za-z0-9_-] (NATS durable names have no '.') and not contain \"__\"",
                    c.name
                ));
            }
            seen.note(&c.name)?;
            for r in &c.routes {
                crate::naming::check_route(r)?;
            }
            let stream = crate::naming::parking_stream(&self.prefix, &c.name);
            let durables = crate::naming::lanes(self, c).into_iter().map(|l| l.durable);
            if let Some(long) = std::iter::once(stream)
                .chain(durables)
                .find(|n| n.len() > MAX_NAME_LEN)
            {
                return bad(format!(
                    "consumer {:?} makes the stream or durable name {long:?} ({} characters); the server takes at most {MAX_NAME_LEN}: shorten the consumer name or the prefix",
                    c.name,
                    long.len()
                ));
            }
        }
        Ok(())
    }
}

/// The longest stream or durable name the server accepts.
pub const MAX_NAME_LEN: usize = 255;

/// Non-empty and `[A-Za-z0-9_-]` only: valid in stream, durable and subject names.
#[must_use]
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A list of durations as text (`250ms`, `5s`, `2m`, `1h`), the way the retry ladder writes
/// them.
mod text_list {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        let texts: Vec<String> = d
            .iter()
            .map(|x| postroom_core::retry::ladder::format_duration(*x))
            .collect();
        s.collect_seq(texts)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts
            .iter()
            .map(|t| {
                postroom_core::retry::ladder::parse_duration(t).map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_server_would_find_too_long_are_refused() {
        let long = "n".repeat(250);
        let e = NatsConfig::new("shop")
            .with_consumer(&long, &["a.b"])
            .validate()
            .unwrap_err();
        assert!(e.message().contains("at most 255"), "{e}");
        let e = NatsConfig::new("p".repeat(256)).validate().unwrap_err();
        assert!(e.message().contains("at most 255"), "{e}");
        let fits = "n".repeat(200);
        NatsConfig::new("shop")
            .with_consumer(&fits, &["a.b"])
            .validate()
            .unwrap();
    }

    #[test]
    fn loads_from_toml_with_defaults_and_refuses_what_2_9_would() {
        let cfg = NatsConfig::from_toml(
            "prefix = \"shop\"\nack_wait = \"5s\"\nbackoff = [\"5s\", \"20s\"]\n[[consumers]]\nname = \"inventory\"\nroutes = [\"order.*\"]\n",
        )
        .unwrap();
        assert_eq!(cfg.ack_wait, Duration::from_secs(5));
        assert_eq!(cfg.backoff.len(), 2);
        assert_eq!(cfg.max_deliver, 10);
        assert!(NatsConfig::from_toml("prefix = \"a.b\"").is_err());
        assert!(
            NatsConfig::from_toml(
                "prefix = \"a\"\nmax_deliver = 2\nack_wait = \"1s\"\nbackoff = [\"1s\", \"2s\"]"
            )
            .is_err()
        );
        assert!(
            NatsConfig::from_toml("prefix = \"a\"\nack_wait = \"2s\"\nbackoff = [\"2s\", \"1s\"]")
                .is_err()
        );
        assert!(NatsConfig::from_toml("prefix = \"a\"\n[[consumers]]\nname = \"a.b\"").is_err());
        assert!(
            NatsConfig::from_toml(
                "prefix = \"a\"\n[[consumers]]\nname = \"c\"\nroutes = [\"a.>\"]"
            )
            .is_err()
        );
    }
}
