//! What a transport is opened for: a workload (a name prefix for queues, topics or streams,
//! the retry ladder, the consumers and the routes each takes), from code or from a topology
//! file. A topology file is TOML; the keys every transport understands are `prefix`,
//! `ladder` and `[[consumers]] name, bindings`; a transport reads its own keys (RabbitMQ:
//! `exchange`, `retry_style`, `delivery_limit`, …) from the same text.

use crate::error::{Error, Result};
use crate::parking::LastErrorLog;
use crate::retry::RetryLadder;
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One consumer and the routes (topic patterns) it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRoutes {
    /// Consumer name.
    pub name: String,
    /// Topic patterns.
    pub routes: Vec<String>,
}

/// A workload on a transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Prefix of every name the workload owns on the broker.
    pub prefix: String,
    /// The retry ladder (`None`: the transport's default).
    pub ladder: Option<RetryLadder>,
    /// Consumers and their routes.
    pub consumers: Vec<ConsumerRoutes>,
}

impl Workload {
    /// A workload under `prefix` with `ladder` and no consumers yet.
    #[must_use]
    pub fn new(prefix: impl Into<String>, ladder: RetryLadder) -> Self {
        Self {
            prefix: prefix.into(),
            ladder: Some(ladder),
            consumers: Vec::new(),
        }
    }

    /// Add a consumer on `routes`.
    #[must_use]
    pub fn consumer(mut self, name: &str, routes: &[&str]) -> Self {
        self.consumers.push(ConsumerRoutes {
            name: name.into(),
            routes: routes.iter().map(|r| (*r).to_string()).collect(),
        });
        self
    }

    /// The consumers' names.
    #[must_use]
    pub fn consumer_names(&self) -> Vec<String> {
        self.consumers.iter().map(|c| c.name.clone()).collect()
    }
}

#[derive(Deserialize)]
struct FileShape {
    prefix: Option<String>,
    ladder: Option<String>,
    #[serde(default)]
    consumers: Vec<FileConsumer>,
}

/// A `[[consumers]]` entry: the neutral keys, and `partitions`, the one consumer key of a
/// transport (RabbitMQ, NATS) that the others refuse themselves. Any other key is refused
/// here, for every transport: dropped, a misspelt `bindings` would leave a consumer bound to
/// nothing.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConsumer {
    name: String,
    #[serde(default)]
    bindings: Vec<String>,
    #[serde(default, rename = "partitions")]
    _partitions: Option<toml::Value>,
}

/// The keys of a topology file that every transport reads; a transport with no keys of its
/// own in the file (Kafka takes its topic settings from the broker URL) refuses any other
/// with [`TopologyFile::only_neutral_keys`].
const NEUTRAL_KEYS: [&str; 3] = ["prefix", "ladder", "consumers"];
const NEUTRAL_CONSUMER_KEYS: [&str; 2] = ["name", "bindings"];

/// A topology file: the workload read from it, and its text for the transport's own keys.
#[derive(Clone, Debug)]
pub struct TopologyFile {
    /// The transport-neutral part.
    pub workload: Workload,
    /// The whole text.
    pub text: String,
}

impl TopologyFile {
    /// Read and parse `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = read_text(path, "topology")?;
        Self::parse(&text).map_err(|e| e.context(path.display()))
    }

    /// Refuse, naming it, any key of `text` (a topology file) that is not a neutral one
    /// (`prefix`, `ladder`, `[[consumers]] name, bindings`), for `transport` that reads
    /// nothing else from the file; `hint` says where its own settings go instead.
    pub fn only_neutral_keys(text: &str, transport: &str, hint: &str) -> Result<()> {
        let table: toml::Table = toml::from_str(text).map_err(|e| Error::config(e.to_string()))?;
        let refuse = |key: &str, known: &[&str]| {
            Error::config(format!(
                "topology file ({transport}): unknown key `{key}` (it reads {}; {hint})",
                known.join(", ")
            ))
        };
        if let Some(key) = table.keys().find(|k| !NEUTRAL_KEYS.contains(&k.as_str())) {
            return Err(refuse(key, &NEUTRAL_KEYS));
        }
        let consumers = table.get("consumers").and_then(toml::Value::as_array);
        for c in consumers
            .into_iter()
            .flatten()
            .filter_map(toml::Value::as_table)
        {
            if let Some(key) = c
                .keys()
                .find(|k| !NEUTRAL_CONSUMER_KEYS.contains(&k.as_str()))
            {
                return Err(refuse(&format!("consumers.{key}"), &NEUTRAL_CONSUMER_KEYS));
            }
        }
        Ok(())
    }

    /// Parse topology TOML.
    pub fn parse(text: &str) -> Result<Self> {
        let shape: FileShape = toml::from_str(text).map_err(|e| Error::config(e.to_string()))?;
        let ladder = shape
            .ladder
            .as_deref()
            .map(super::text::parse_ladder)
            .transpose()?;
        // Every transport names its queues, topics or durables after the consumer: a
        // consumer without a name, or two with one, is a mistake on any of them.
        let mut seen = crate::config_file::ConsumersSeen::new();
        for (i, c) in shape.consumers.iter().enumerate() {
            if c.name.trim().is_empty() {
                return Err(Error::config(format!(
                    "[[consumers]] entry {}: the consumer name must not be empty",
                    i + 1
                )));
            }
            seen.note(&c.name)?;
        }
        Ok(Self {
            workload: Workload {
                prefix: shape.prefix.unwrap_or_else(|| "postroom".into()),
                ladder,
                consumers: shape
                    .consumers
                    .into_iter()
                    .map(|c| ConsumerRoutes {
                        name: c.name,
                        routes: c.bindings,
                    })
                    .collect(),
            },
            text: text.into(),
        })
    }
}

/// The text of the file at `path`; `what` names it in the error (`config`, `topology`).
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::config(format!("cannot read {what} file {}: {e}", path.display())))
}

/// How to open a transport.
#[derive(Clone)]
pub struct TransportSpec {
    /// The workload.
    pub workload: Workload,
    /// The topology file's text, when the workload came from one (for transport-specific keys).
    pub topology_text: Option<String>,
    /// Delete whatever the workload's prefix names on the broker and declare its topology
    /// afresh (the demo's and soak's parent process does it once per run).
    pub fresh: bool,
    /// How long a delivery nobody settles stays owned before it is delivered again, where the
    /// transport has such a setting (NATS `ack_wait`, SQS's visibility timeout); `None`: the
    /// topology's or the transport's default.
    pub redelivery_after: Option<Duration>,
    /// Where the consumers' last errors are kept, on transports that dead-letter a message
    /// by themselves and join its copy with them (SQS); `None`: the transport's own, in
    /// memory. The store's log lets a copy ingested by another process keep its diagnostics.
    pub last_errors: Option<Arc<dyn LastErrorLog>>,
}

/// Hand-written: the last-error log has no `Debug`.
impl std::fmt::Debug for TransportSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportSpec")
            .field("workload", &self.workload)
            .field("topology_text", &self.topology_text.is_some())
            .field("fresh", &self.fresh)
            .field("redelivery_after", &self.redelivery_after)
            .field("last_errors", &self.last_errors.is_some())
            .finish()
    }
}

impl TransportSpec {
    /// For `workload`, declared by whoever runs it first.
    #[must_use]
    pub fn of(workload: Workload) -> Self {
        Self {
            workload,
            topology_text: None,
            fresh: false,
            redelivery_after: None,
            last_errors: None,
        }
    }

    /// From a topology file.
    #[must_use]
    pub fn from_file(file: TopologyFile) -> Self {
        Self {
            workload: file.workload,
            topology_text: Some(file.text),
            fresh: false,
            redelivery_after: None,
            last_errors: None,
        }
    }

    /// Start from an empty broker state.
    #[must_use]
    pub fn fresh(mut self) -> Self {
        self.fresh = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consumer_key_no_transport_reads_is_refused_by_name() {
        let e = TopologyFile::parse("[[consumers]]\nname = \"c\"\nroutes = [\"a\"]\n").unwrap_err();
        assert!(e.message().contains("unknown field `routes`"), "{e}");
        // `partitions` is RabbitMQ's and NATS's; the transports that have none refuse it.
        let f = TopologyFile::parse("[[consumers]]\nname = \"c\"\npartitions = 4\n").unwrap();
        assert_eq!(f.workload.consumers[0].name, "c");
    }

    #[test]
    fn neutral_keys_of_a_rabbitmq_topology_file() {
        let f = TopologyFile::parse(
            "prefix = \"shop\"\nexchange = \"orders\"\nladder = \"5s,30s,5m\"\nretry_style = \"ack_publish\"\n\
             [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\", \"order.cancelled\"]\n",
        )
        .unwrap();
        assert_eq!(f.workload.prefix, "shop");
        assert_eq!(f.workload.ladder.unwrap().to_string(), "5s,30s,5m");
        assert_eq!(f.workload.consumers[0].routes.len(), 2);
        assert!(TopologyFile::parse("prefix = [1").is_err());
        assert!(TopologyFile::parse("ladder = \"9000000000000h\"").is_err());
    }
}
