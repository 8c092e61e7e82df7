//! The message envelope: the contract every producer and consumer shares.

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A message id: a UUIDv7, so ids sort by creation time.
///
/// Created once with the outbox row and reused on every retry, republish and redrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageId(uuid::Uuid);

impl MessageId {
    /// A new time-ordered id.
    #[must_use]
    pub fn new() -> Self {
        Self(uuid::Uuid::now_v7())
    }

    /// The underlying UUID.
    #[must_use]
    pub fn as_uuid(&self) -> uuid::Uuid {
        self.0
    }

    /// A stable id derived from `content` (a name-based UUID): the same bytes always give the
    /// same id. For a message that arrived without an id, so that parking it twice keeps one
    /// record and a redrive of it is recognised.
    #[must_use]
    pub fn derived_from(content: &[u8]) -> Self {
        /// The namespace of ids postroom derives from message content.
        const NAMESPACE: uuid::Uuid =
            uuid::Uuid::from_u128(0x6a1f_3c2e_9b7d_4e0a_8c55_0d2b_7e91_f4a3);
        Self(uuid::Uuid::new_v5(&NAMESPACE, content))
    }
}

impl Default for MessageId {
    fn default() -> Self {
        Self::new()
    }
}

impl From<uuid::Uuid> for MessageId {
    fn from(value: uuid::Uuid) -> Self {
        Self(value)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for MessageId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s).map(Self)
    }
}

/// The aggregate a message is about: its type, its id and the version this event produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Aggregate type, e.g. `order`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Aggregate id, e.g. the order id.
    pub id: String,
    /// Version of the aggregate after this event (1, 2, 3, …).
    pub version: u64,
}

impl Aggregate {
    /// The key used for per-aggregate ordering and partitioning: `type:id`.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}:{}", self.kind, self.id)
    }

    /// Whether this names no aggregate (type and id both empty, what
    /// [`Envelope::builder`] starts with): the message is unordered.
    #[must_use]
    pub fn is_unset(&self) -> bool {
        self.kind.is_empty() && self.id.is_empty()
    }

    /// The key this message is ordered under, or `None` for a message without an aggregate:
    /// it is then its own key (its id) and waits behind no other message.
    #[must_use]
    pub fn ordering_key(&self) -> Option<String> {
        (!self.is_unset()).then(|| self.key())
    }
}

/// W3C trace context carried with the message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// `traceparent` header value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// `tracestate` header value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// The envelope of every postroom message. Unknown fields are ignored on decode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Stable id.
    pub id: MessageId,
    /// Message type, e.g. `order.created`.
    #[serde(rename = "type")]
    pub message_type: String,
    /// Version of the `data` schema for this type.
    pub schema_version: u32,
    /// When the business fact happened; the retry deadline counts from here.
    pub occurred_at: DateTime<Utc>,
    /// The producing service.
    pub producer: String,
    /// Correlation id shared by everything caused by one request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Id of the message that caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    /// The aggregate and its version.
    pub aggregate: Aggregate,
    /// The payload.
    pub data: serde_json::Value,
    /// W3C trace context.
    #[serde(default)]
    pub trace: TraceContext,
}

impl Envelope {
    /// Start building an envelope with a fresh id and `occurred_at = now`. Without
    /// [`aggregate`](EnvelopeBuilder::aggregate) the message has none and is unordered (see
    /// there).
    pub fn builder(
        message_type: impl Into<String>,
        producer: impl Into<String>,
    ) -> EnvelopeBuilder {
        EnvelopeBuilder {
            envelope: Envelope {
                id: MessageId::new(),
                message_type: message_type.into(),
                schema_version: 1,
                occurred_at: Utc::now().trunc_subsecs(6),
                producer: producer.into(),
                correlation_id: None,
                causation_id: None,
                aggregate: Aggregate {
                    kind: String::new(),
                    id: String::new(),
                    version: 0,
                },
                data: serde_json::Value::Null,
                trace: TraceContext::default(),
            },
        }
    }

    /// The payload as a typed value. A payload that does not fit `T` is a permanent error
    /// (code `malformed_data`): retrying cannot change it, so `?` in a handler parks it.
    pub fn data_as<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<T, crate::outcome::HandlerError> {
        // The error names where and what was expected, never the value (payloads hold
        // personal data, and parked errors are shown to every reader of the parking lot).
        crate::decode::deserialize_redacted(T::deserialize(&self.data), &self.data).map_err(|e| {
            crate::outcome::HandlerError::permanent(
                crate::outcome::codes::MALFORMED_DATA,
                format!(
                    "the data of {} {} does not fit: {e}",
                    self.message_type, self.id
                ),
            )
        })
    }

    /// Encode as JSON bytes.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an envelope always serialises")
    }

    /// A new envelope caused by this one: same correlation id, causation id = this id.
    pub fn follow_up(
        &self,
        message_type: impl Into<String>,
        producer: impl Into<String>,
    ) -> EnvelopeBuilder {
        let mut b = Envelope::builder(message_type, producer);
        b.envelope.correlation_id = self
            .correlation_id
            .clone()
            .or_else(|| Some(self.id.to_string()));
        b.envelope.causation_id = Some(self.id.to_string());
        b.envelope.trace = self.trace.clone();
        b
    }
}

/// Builder for [`Envelope`].
#[must_use]
#[derive(Debug, Clone)]
pub struct EnvelopeBuilder {
    envelope: Envelope,
}

crate::setters!(EnvelopeBuilder {
    /// Set the id (normally left as the generated one).
    id => envelope.id: MessageId,
    /// Set the schema version.
    schema_version => envelope.schema_version: u32,
    /// Set the payload.
    data => envelope.data: serde_json::Value,
    /// Set when the fact happened.
    occurred_at => envelope.occurred_at: DateTime<Utc>,
    /// Set the W3C trace context.
    trace => envelope.trace: TraceContext,
});

impl EnvelopeBuilder {
    /// Set the aggregate: messages of one aggregate are published and handled in the order
    /// they were written. A message built without one is unordered: it is its own key (its
    /// id), carries no `x-aggregate-key` header, and the relay publishes it without waiting
    /// for any other message (messages of one shared key would go out one at a time).
    pub fn aggregate(
        mut self,
        kind: impl Into<String>,
        id: impl Into<String>,
        version: u64,
    ) -> Self {
        self.envelope.aggregate = Aggregate {
            kind: kind.into(),
            id: id.into(),
            version,
        };
        self
    }
    /// Set the correlation id.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.envelope.correlation_id = Some(id.into());
        self
    }
    /// Set the causation id.
    pub fn causation_id(mut self, id: impl Into<String>) -> Self {
        self.envelope.causation_id = Some(id.into());
        self
    }
    /// Finish.
    #[must_use]
    pub fn build(self) -> Envelope {
        self.envelope
    }
}
