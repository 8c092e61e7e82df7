//! The JetStream API's JSON for streams and consumers, only the fields postroom sets or
//! reads, written out here so that nothing a 2.9 server does not know is ever sent.

use serde::{Deserialize, Serialize};
use std::time::Duration;

// Durations travel as nanoseconds.
mod nanos {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let n = i64::deserialize(d)?;
        Ok(Duration::from_nanos(n.max(0) as u64))
    }
}

// A list of nanosecond durations.
mod nanos_list {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            d.iter()
                .map(|x| u64::try_from(x.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        let v = Option::<Vec<i64>>::deserialize(d)?.unwrap_or_default();
        Ok(v.into_iter()
            .map(|n| Duration::from_nanos(n.max(0) as u64))
            .collect())
    }
}

/// A stream's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamConfig {
    /// Name.
    pub name: String,
    /// Subjects it captures.
    #[serde(default)]
    pub subjects: Vec<String>,
    /// `limits`, `interest` or `workqueue`.
    #[serde(default = "limits")]
    pub retention: String,
    /// `file` or `memory`.
    #[serde(default = "file")]
    pub storage: String,
    /// Replicas.
    #[serde(default = "one")]
    pub num_replicas: usize,
    /// Maximum age of a message.
    #[serde(default, with = "nanos")]
    pub max_age: Duration,
    /// Deduplication window of `Nats-Msg-Id`.
    #[serde(default, with = "nanos")]
    pub duplicate_window: Duration,
    /// Unlimited (-1).
    #[serde(default = "minus_one")]
    pub max_msgs: i64,
    /// Unlimited (-1).
    #[serde(default = "minus_one")]
    pub max_bytes: i64,
    /// Unlimited (-1).
    #[serde(default = "minus_one_i32")]
    pub max_consumers: i32,
    /// `old`: drop the oldest when full.
    #[serde(default = "old")]
    pub discard: String,
}

fn limits() -> String {
    "limits".into()
}
fn file() -> String {
    "file".into()
}
fn old() -> String {
    "old".into()
}
fn one() -> usize {
    1
}
fn minus_one() -> i64 {
    -1
}
fn minus_one_i32() -> i32 {
    -1
}

/// Stream state.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamState {
    /// Messages held.
    #[serde(default)]
    pub messages: u64,
    /// First sequence.
    #[serde(default)]
    pub first_seq: u64,
    /// Last sequence.
    #[serde(default)]
    pub last_seq: u64,
}

/// `STREAM.INFO` answer.
#[derive(Clone, Debug, Deserialize)]
pub struct StreamInfo {
    /// Configuration as the server keeps it.
    pub config: StreamConfig,
    /// State.
    #[serde(default)]
    pub state: StreamState,
}

/// A durable pull consumer's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConsumerConfig {
    /// Durable name.
    pub durable_name: String,
    /// Always `explicit`.
    #[serde(default)]
    pub ack_policy: String,
    /// Always `all`.
    #[serde(default)]
    pub deliver_policy: String,
    /// Always `instant`.
    #[serde(default)]
    pub replay_policy: String,
    /// Ownership without a Progress heartbeat.
    #[serde(default, with = "nanos")]
    pub ack_wait: Duration,
    /// Deliveries of one copy (-1 unlimited).
    #[serde(default)]
    pub max_deliver: i64,
    /// Filter subject (empty: the whole stream).
    #[serde(default)]
    pub filter_subject: String,
    /// Unsettled copies at once.
    #[serde(default)]
    pub max_ack_pending: i64,
    /// Redelivery delays after ack-wait expiries.
    #[serde(default, with = "nanos_list", skip_serializing_if = "Vec::is_empty")]
    pub backoff: Vec<Duration>,
}

/// Sequence numbers of a consumer.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SequenceInfo {
    /// Consumer sequence.
    #[serde(default)]
    pub consumer_seq: u64,
    /// Stream sequence.
    #[serde(default)]
    pub stream_seq: u64,
}

/// `CONSUMER.INFO` answer.
#[derive(Clone, Debug, Deserialize)]
pub struct ConsumerInfo {
    /// Durable name.
    pub name: String,
    /// Configuration as the server keeps it.
    pub config: ConsumerConfig,
    /// Last delivered.
    #[serde(default)]
    pub delivered: SequenceInfo,
    /// Everything at or below is acknowledged.
    #[serde(default)]
    pub ack_floor: SequenceInfo,
    /// Delivered and unsettled (delayed naks included).
    #[serde(default)]
    pub num_ack_pending: u64,
    /// Redelivered and unsettled.
    #[serde(default)]
    pub num_redelivered: u64,
    /// Pull requests waiting.
    #[serde(default)]
    pub num_waiting: u64,
    /// Matching messages not yet delivered.
    #[serde(default)]
    pub num_pending: u64,
}

/// `CONSUMER.DURABLE.CREATE` request.
#[derive(Clone, Debug, Serialize)]
pub struct CreateConsumer<'a> {
    /// Stream.
    pub stream_name: &'a str,
    /// Configuration.
    pub config: &'a ConsumerConfig,
}

/// `CONSUMER.LIST` answer (one page).
#[derive(Clone, Debug, Deserialize)]
pub struct ConsumerList {
    /// Total.
    #[serde(default)]
    pub total: usize,
    /// Offset of this page.
    #[serde(default)]
    pub offset: usize,
    /// Consumers.
    #[serde(default)]
    pub consumers: Vec<ConsumerInfo>,
}

/// Whether a `STREAM.DELETE` / `STREAM.MSG.DELETE` succeeded.
#[derive(Clone, Debug, Deserialize)]
pub struct Success {
    /// Done.
    #[serde(default)]
    pub success: bool,
}
