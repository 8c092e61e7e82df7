//! A parked message as portable string headers on a transport's dead-letter place (a parking
//! queue, topic or stream, a DLQ), and back. Every diagnostic travels as a header, so the
//! dead-letter place alone is enough to rebuild the record in any
//! [`ParkingStore`](super::ParkingStore).
//!
//! A copy the transport dead-lettered by itself (a delivery limit, a receive count) carries no
//! diagnostics of postroom's: the transport's dead-letter subscriber describes what it knows
//! in the `x-dead-letter-*` headers and the record is built from those.

use super::{ParkedMessage, ParkedStatus};
use crate::envelope::MessageId;
use crate::error::ErrorClass;
use crate::message::{Headers, headers as h};
use chrono::{DateTime, Utc};

/// When the message was parked (RFC 3339).
pub const PARKED_AT: &str = "x-parked-at";
/// Deliveries made before parking.
pub const PARKED_ATTEMPTS: &str = "x-parked-attempts";
/// Schema version of the envelope, when it could be read.
pub const SCHEMA_VERSION: &str = "x-schema-version";
/// Why the transport dead-lettered a copy by itself (`delivery_limit`, `max_deliveries`,
/// `max_receive_count`, `rejected`, …), set by the transport's dead-letter subscriber.
pub const DEAD_LETTER_REASON: &str = "x-dead-letter-reason";
/// The queue, stream or topic the transport dead-lettered it from.
pub const DEAD_LETTERED_FROM: &str = "x-dead-lettered-from";
/// How many deliveries the transport made before it dead-lettered the copy.
pub const DEAD_LETTER_COUNT: &str = "x-dead-letter-count";
/// When the transport first dead-lettered it (RFC 3339).
pub const DEAD_LETTERED_AT: &str = "x-dead-lettered-at";

/// Headers that exist only on the parking copy; stripped again when the record is rebuilt.
const PARK_ONLY: [&str; 9] = [
    PARKED_AT,
    PARKED_ATTEMPTS,
    SCHEMA_VERSION,
    h::PARKED_BY,
    h::PARKED_BY_VERSION,
    DEAD_LETTER_REASON,
    DEAD_LETTERED_FROM,
    DEAD_LETTER_COUNT,
    DEAD_LETTERED_AT,
];

/// The headers of the parking copy of `record`: the headers it arrived with plus every
/// diagnostic.
#[must_use]
pub fn to_headers(record: &ParkedMessage) -> Headers {
    let mut out = record.headers.clone();
    let mut put = |k: &str, v: String| {
        out.insert(k.to_string(), v);
    };
    put(h::PARKED_BY, record.consumer.clone());
    put(h::PARKED_BY_VERSION, record.consumer_version.clone());
    put(PARKED_AT, record.parked_at.to_rfc3339());
    put(PARKED_ATTEMPTS, record.attempts.to_string());
    put(h::FIRST_FAILURE_AT, record.first_failure_at.to_rfc3339());
    put(h::LAST_ERROR_CLASS, record.error_class.as_str().to_string());
    put(h::LAST_ERROR_CODE, record.error_code.clone());
    put(h::LAST_ERROR, record.error_message.clone());
    put(h::ORIGINAL_ROUTE, record.routing_key.clone());
    put(h::REDRIVE_COUNT, record.redrive_count.to_string());
    if let Some(v) = record.schema_version {
        put(SCHEMA_VERSION, v.to_string());
    }
    if let Some(t) = &record.message_type {
        put(h::MESSAGE_TYPE, t.clone());
    }
    if let Some(c) = &record.correlation_id {
        put(h::CORRELATION_ID, c.clone());
    }
    if let Some(t) = &record.traceparent {
        put(h::TRACEPARENT, t.clone());
    }
    if let Some(p) = &record.producer {
        put(h::PRODUCER, p.clone());
    }
    out
}

fn time(s: Option<&String>) -> Option<DateTime<Utc>> {
    s.and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// Rebuild the record of a copy read from `consumer`'s dead-letter place. `id` is the
/// transport's message id (a copy without one gets an id derived from its body, the same
/// every time); `routing_key` is where it was read from, used when no original route is known.
/// Never fails: unreadable headers fall back to what can be known.
#[must_use]
pub fn from_headers(
    consumer: &str,
    id: Option<MessageId>,
    routing_key: &str,
    all: &Headers,
    body: &[u8],
) -> ParkedMessage {
    let now = Utc::now();
    let by_postroom = all.contains_key(h::PARKED_BY);
    let mut headers = all.clone();
    for k in PARK_ONLY {
        headers.remove(k);
    }
    let reason = all.get(DEAD_LETTER_REASON);
    let from = all.get(DEAD_LETTERED_FROM);
    let count: Option<u32> = all.get(DEAD_LETTER_COUNT).and_then(|v| v.parse().ok());
    let (class, code, message) = if by_postroom {
        (
            all.get(h::LAST_ERROR_CLASS)
                .and_then(|c| c.parse().ok())
                .unwrap_or(ErrorClass::Unknown),
            all.get(h::LAST_ERROR_CODE).cloned().unwrap_or_default(),
            all.get(h::LAST_ERROR).cloned().unwrap_or_default(),
        )
    } else {
        let code = reason.cloned().unwrap_or_else(|| "dead_lettered".into());
        let mut text = match (from, count) {
            (Some(f), Some(n)) => {
                format!("dead-lettered by the transport from {f} ({code}, after {n} deliveries)")
            }
            (Some(f), None) => format!("dead-lettered by the transport from {f} ({code})"),
            _ => "dead-lettered by the transport without postroom diagnostics".to_string(),
        };
        if let Some(last) = all.get(h::LAST_ERROR) {
            text.push_str("; last error recorded: ");
            text.push_str(last);
        }
        (ErrorClass::Unknown, code, text)
    };
    ParkedMessage {
        message_id: id.unwrap_or_else(|| MessageId::derived_from(body)),
        consumer: all
            .get(h::PARKED_BY)
            .cloned()
            .unwrap_or_else(|| consumer.to_string()),
        consumer_version: all.get(h::PARKED_BY_VERSION).cloned().unwrap_or_default(),
        message_type: all.get(h::MESSAGE_TYPE).cloned(),
        schema_version: all.get(SCHEMA_VERSION).and_then(|v| v.parse().ok()),
        attempts: all
            .get(PARKED_ATTEMPTS)
            .and_then(|v| v.parse().ok())
            .or(count)
            .unwrap_or(1),
        first_failure_at: time(all.get(h::FIRST_FAILURE_AT))
            .or_else(|| time(all.get(DEAD_LETTERED_AT)))
            .unwrap_or(now),
        parked_at: time(all.get(PARKED_AT)).unwrap_or(now),
        error_class: class,
        error_code: code,
        error_message: crate::message::truncate(&message, super::MAX_ERROR_CHARS),
        correlation_id: all.get(h::CORRELATION_ID).cloned(),
        traceparent: all.get(h::TRACEPARENT).cloned(),
        routing_key: all
            .get(h::ORIGINAL_ROUTE)
            .cloned()
            .or_else(|| from.cloned())
            .unwrap_or_else(|| routing_key.to_string()),
        producer: all.get(h::PRODUCER).cloned(),
        headers,
        body: body.to_vec(),
        status: ParkedStatus::Parked,
        redrive_count: all
            .get(h::REDRIVE_COUNT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ParkedMessage {
        let mut headers = Headers::new();
        headers.insert("x-retry-attempt".into(), "2".into());
        ParkedMessage {
            message_id: MessageId::new(),
            consumer: "inv".into(),
            consumer_version: "1.2".into(),
            message_type: Some("order.created".into()),
            schema_version: Some(1),
            attempts: 3,
            first_failure_at: Utc::now() - chrono::Duration::seconds(30),
            parked_at: Utc::now(),
            error_class: ErrorClass::Transient,
            error_code: "db_down".into(),
            error_message: "connection refused".into(),
            correlation_id: Some("c-1".into()),
            traceparent: Some("00-abc-def-01".into()),
            routing_key: "order.created".into(),
            producer: Some("orders".into()),
            headers,
            body: b"{}".to_vec(),
            status: ParkedStatus::Parked,
            redrive_count: 0,
        }
    }

    #[test]
    fn round_trip_keeps_every_diagnostic() {
        let rec = record();
        let back = from_headers(
            "inv",
            Some(rec.message_id),
            "parked",
            &to_headers(&rec),
            b"{}",
        );
        assert_eq!(back.message_id, rec.message_id);
        assert_eq!(back.consumer_version, "1.2");
        assert_eq!(back.attempts, 3);
        assert_eq!(back.error_class, ErrorClass::Transient);
        assert_eq!(back.error_code, "db_down");
        assert_eq!(back.routing_key, "order.created");
        assert_eq!(back.schema_version, Some(1));
        assert_eq!(
            back.first_failure_at.timestamp(),
            rec.first_failure_at.timestamp()
        );
        assert_eq!(
            back.headers.get("x-retry-attempt").map(String::as_str),
            Some("2")
        );
        assert!(
            !back.headers.contains_key(PARKED_AT),
            "parking-only headers stripped"
        );
    }

    #[test]
    fn a_copy_the_transport_dead_lettered_is_described_by_its_headers() {
        let mut all = Headers::new();
        all.insert(DEAD_LETTER_REASON.into(), "delivery_limit".into());
        all.insert(DEAD_LETTERED_FROM.into(), "shop.inventory".into());
        all.insert(DEAD_LETTER_COUNT.into(), "9".into());
        let back = from_headers("inventory", None, "parked", &all, b"body");
        assert_eq!(back.error_code, "delivery_limit");
        assert_eq!(back.attempts, 9);
        assert_eq!(back.routing_key, "shop.inventory");
        assert!(
            back.error_message.contains("9 deliveries"),
            "{}",
            back.error_message
        );
        assert_eq!(
            back.message_id,
            from_headers("inventory", None, "parked", &all, b"body").message_id,
            "a copy without an id gets the same derived id every time"
        );
        assert!(back.headers.is_empty());
    }
}
