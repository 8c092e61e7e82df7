//! What travels on a transport: the envelope bytes plus headers, and where it goes.

use crate::envelope::{Envelope, MessageId};
use std::collections::BTreeMap;

/// Header names postroom sets. The attempt count lives in postroom's own header, never in
/// broker bookkeeping such as `x-death`.
pub mod headers {
    /// Retries already made for this message (0 or absent on the first delivery).
    pub const RETRY_ATTEMPT: &str = "x-retry-attempt";
    /// When the first failure happened (RFC 3339).
    pub const FIRST_FAILURE_AT: &str = "x-first-failure-at";
    /// Class of the last error.
    pub const LAST_ERROR_CLASS: &str = "x-last-error-class";
    /// Code of the last error.
    pub const LAST_ERROR_CODE: &str = "x-last-error-code";
    /// Text of the last error (truncated).
    pub const LAST_ERROR: &str = "x-last-error";
    /// The route the message was first published with.
    pub const ORIGINAL_ROUTE: &str = "x-original-route";
    /// How many times an operator redrove this message.
    pub const REDRIVE_COUNT: &str = "x-redrive-count";
    /// Message type, copied from the envelope so that corrupt bodies keep a hint.
    pub const MESSAGE_TYPE: &str = "x-message-type";
    /// Correlation id, copied from the envelope.
    pub const CORRELATION_ID: &str = "x-correlation-id";
    /// W3C trace parent.
    pub const TRACEPARENT: &str = "traceparent";
    /// Producer.
    pub const PRODUCER: &str = "x-producer";
    /// Consumer that parked the message.
    pub const PARKED_BY: &str = "x-parked-by";
    /// Version of the consumer that parked the message.
    pub const PARKED_BY_VERSION: &str = "x-parked-by-version";
    /// Aggregate key, used for partitioning.
    pub const AGGREGATE_KEY: &str = "x-aggregate-key";
}

/// Headers as ordered string pairs: portable across all four brokers.
pub type Headers = BTreeMap<String, String>;

/// Where a publish goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// A topic / routing key: every subscribed consumer gets a copy.
    Topic(String),
    /// One consumer's work queue only (redrive, retries).
    Consumer(String),
}

impl Route {
    /// The routing key or consumer name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Route::Topic(s) | Route::Consumer(s) => s,
        }
    }
}

/// A message to publish, with its stable id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// Stable id (the transport sets it as its native message id / dedup id).
    pub id: MessageId,
    /// Destination.
    pub route: Route,
    /// Headers.
    pub headers: Headers,
    /// Envelope bytes (JSON), or whatever bytes a redrive carries.
    pub body: Vec<u8>,
}

impl OutgoingMessage {
    /// A message to a topic from an envelope; the routing key defaults to the message type.
    #[must_use]
    pub fn from_envelope(envelope: &Envelope, topic: impl Into<String>) -> Self {
        let mut headers = Headers::new();
        headers.insert(headers::MESSAGE_TYPE.into(), envelope.message_type.clone());
        headers.insert(headers::PRODUCER.into(), envelope.producer.clone());
        // A message without an aggregate carries no key: it is its own (its id), unordered.
        if let Some(key) = envelope.aggregate.ordering_key() {
            headers.insert(headers::AGGREGATE_KEY.into(), key);
        }
        if let Some(c) = &envelope.correlation_id {
            headers.insert(headers::CORRELATION_ID.into(), c.clone());
        }
        if let Some(t) = &envelope.trace.traceparent {
            headers.insert(headers::TRACEPARENT.into(), t.clone());
        }
        Self {
            id: envelope.id,
            route: Route::Topic(topic.into()),
            headers,
            body: envelope.to_bytes(),
        }
    }

    /// The retry attempt in the headers (0 when absent).
    #[must_use]
    pub fn attempt(&self) -> u32 {
        attempt_of(&self.headers)
    }

    /// The key an outbox keeps this message's order under: its `x-aggregate-key` header
    /// (what consumers order by, set by [`from_envelope`](Self::from_envelope) for a message
    /// with an aggregate), else its id (a message of its own, ordered after nothing, as a
    /// message without an aggregate is). Every store reads it this way.
    #[must_use]
    pub fn aggregate_key(&self) -> String {
        self.headers
            .get(headers::AGGREGATE_KEY)
            .cloned()
            .unwrap_or_else(|| self.id.to_string())
    }
}

/// The retry attempt in `headers` (0 when absent or unreadable).
#[must_use]
pub fn attempt_of(headers: &Headers) -> u32 {
    headers
        .get(headers::RETRY_ATTEMPT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Truncate error text for storage and headers, on a character boundary.
#[must_use]
pub fn truncate(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max_chars).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_with_an_aggregate_is_kept_in_order_under_its_key() {
        let env = Envelope::builder("order.created", "t")
            .aggregate("order", "o1", 1)
            .build();
        let m = OutgoingMessage::from_envelope(&env, "order.created");
        assert_eq!(
            m.headers.get(headers::AGGREGATE_KEY).map(String::as_str),
            Some("order:o1")
        );
        assert_eq!(m.aggregate_key(), "order:o1");
    }

    /// Without an aggregate a message is its own key (its id): unordered, it waits behind no
    /// other message, and no header claims an aggregate it does not have.
    #[test]
    fn a_message_without_an_aggregate_is_its_own_key() {
        let one = Envelope::builder("note.added", "t").build();
        let two = Envelope::builder("note.added", "t").build();
        let (m1, m2) = (
            OutgoingMessage::from_envelope(&one, "note.added"),
            OutgoingMessage::from_envelope(&two, "note.added"),
        );
        assert_eq!(m1.headers.get(headers::AGGREGATE_KEY), None);
        assert_eq!(m1.aggregate_key(), one.id.to_string());
        assert_eq!(m2.aggregate_key(), two.id.to_string());
    }
}
