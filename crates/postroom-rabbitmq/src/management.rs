//! A small client of the RabbitMQ management HTTP API: what the topology reads and writes
//! (exchanges, queues, bindings, policies). Policies exist only there, which is why the
//! topology goes through it rather than through AMQP x-arguments.
//!
//! The API's records (below) are always here, for planning against them;
//! [`ManagementApi`], the HTTP client, comes with the feature `client`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
pub use client::{ManagementApi, encode_segment};

/// An exchange as the API shows it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ExchangeInfo {
    /// Name (`""` is the default exchange).
    pub name: String,
    /// `topic`, `direct`, `fanout`, `headers`, `x-consistent-hash`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Survives a broker restart.
    pub durable: bool,
    /// Declared arguments.
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

/// A queue as the API shows it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct QueueInfo {
    /// Name.
    pub name: String,
    /// `quorum`, `classic`, `stream`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Survives a broker restart.
    #[serde(default)]
    pub durable: bool,
    /// Declared arguments.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Name of the policy applied, if any.
    #[serde(default)]
    pub policy: Option<String>,
    /// The definition in force (an object; older brokers send `[]` when empty).
    #[serde(default)]
    pub effective_policy_definition: Value,
    /// Ready messages.
    #[serde(default)]
    pub messages_ready: Option<u64>,
    /// Delivered, not yet settled.
    #[serde(default)]
    pub messages_unacknowledged: Option<u64>,
    /// All messages.
    #[serde(default)]
    pub messages: Option<u64>,
    /// Consumers attached.
    #[serde(default)]
    pub consumers: Option<u64>,
    /// Rates and totals (`publish`, `deliver`, `ack`, …) once the broker has collected them.
    #[serde(default)]
    pub message_stats: Value,
}

/// A binding.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct BindingInfo {
    /// Source exchange (`""`: the default exchange).
    pub source: String,
    /// Destination queue or exchange.
    pub destination: String,
    /// `queue` or `exchange`.
    pub destination_type: String,
    /// Routing key.
    pub routing_key: String,
    /// The API's key for deleting this binding.
    #[serde(default)]
    pub properties_key: String,
}

/// A policy. postroom applies its policies to `queues` (exact-name patterns), which every
/// RabbitMQ version accepts; `quorum_queues` exists only from 3.12 on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// Name (unique per vhost).
    pub name: String,
    /// Regex over queue names.
    pub pattern: String,
    /// `queues`, `quorum_queues`, `exchanges`, `all`.
    #[serde(rename = "apply-to")]
    pub apply_to: String,
    /// Keys such as `message-ttl`, `dead-letter-exchange`, `delivery-limit`.
    pub definition: Map<String, Value>,
    /// Highest priority wins; policies never merge.
    pub priority: i64,
}
