//! A parked message as AMQP headers on `<consumer>.parking`, and back (R11).
//!
//! Every diagnostic travels as a header, so the parking queue alone is enough to rebuild the
//! record in any [`ParkingStore`](postroom_core::ParkingStore). Messages the broker itself
//! dead-lettered (delivery limit exceeded) carry no postroom diagnostics: their record is built
//! from `x-death`.

use crate::headers::{XDeath, from_field_table, x_deaths};
use chrono::{DateTime, Utc};
use lapin::BasicProperties;
use postroom_core::message::headers as h;
use postroom_core::{ErrorClass, Headers, MessageId, ParkedMessage, ParkedStatus};

/// When the message was parked (RFC 3339).
pub const PARKED_AT: &str = "x-parked-at";
/// Deliveries made before parking.
pub const PARKED_ATTEMPTS: &str = "x-parked-attempts";
/// Schema version of the envelope, when it could be read.
pub const SCHEMA_VERSION: &str = "x-schema-version";

/// Headers that exist only on the parking copy; stripped again when the record is rebuilt.
const PARK_ONLY: [&str; 5] = [
    PARKED_AT,
    PARKED_ATTEMPTS,
    SCHEMA_VERSION,
    h::PARKED_BY,
    h::PARKED_BY_VERSION,
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

/// Rebuild the record of a message read from `consumer`'s parking queue.
#[must_use]
pub fn from_message(
    consumer: &str,
    properties: &BasicProperties,
    routing_key: &str,
    body: &[u8],
) -> ParkedMessage {
    let all = from_field_table(properties.headers().as_ref());
    let deaths = x_deaths(properties.headers().as_ref());
    let now = Utc::now();
    let id = properties
        .message_id()
        .as_ref()
        .and_then(|s| s.as_str().parse::<MessageId>().ok())
        .unwrap_or_default();
    let by_postroom = all.contains_key(h::PARKED_BY);
    let broker_reason = broker_reason(&deaths);
    let mut headers = all.clone();
    for k in PARK_ONLY {
        headers.remove(k);
    }
    let (class, code, message) = if by_postroom {
        (
            all.get(h::LAST_ERROR_CLASS)
                .and_then(|c| c.parse().ok())
                .unwrap_or(ErrorClass::Unknown),
            all.get(h::LAST_ERROR_CODE).cloned().unwrap_or_default(),
            all.get(h::LAST_ERROR).cloned().unwrap_or_default(),
        )
    } else {
        let d = broker_reason.as_ref();
        (
            ErrorClass::Unknown,
            d.map_or_else(|| "dead_lettered".to_string(), |d| d.reason.clone()),
            d.map_or_else(
                || "dead-lettered by the broker without postroom diagnostics".to_string(),
                |d| {
                    format!(
                        "dead-lettered by the broker from {} ({}, {} times)",
                        d.queue, d.reason, d.count
                    )
                },
            ),
        )
    };
    let delivery_count: Option<u32> = all.get("x-delivery-count").and_then(|v| v.parse().ok());
    ParkedMessage {
        message_id: id,
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
            .or_else(|| {
                broker_reason
                    .as_ref()
                    .map(|d| u32::try_from(d.count).unwrap_or(u32::MAX))
            })
            .or(delivery_count)
            .unwrap_or(1),
        first_failure_at: time(all.get(h::FIRST_FAILURE_AT))
            .or_else(|| broker_reason.as_ref().and_then(|d| d.time))
            .unwrap_or(now),
        parked_at: time(all.get(PARKED_AT)).unwrap_or(now),
        error_class: class,
        error_code: code,
        error_message: message,
        correlation_id: all.get(h::CORRELATION_ID).cloned(),
        traceparent: all.get(h::TRACEPARENT).cloned(),
        routing_key: all.get(h::ORIGINAL_ROUTE).cloned().unwrap_or_else(|| {
            broker_reason
                .as_ref()
                .map_or_else(|| routing_key.to_string(), |d| d.queue.clone())
        }),
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

/// The most recent broker dead-lettering other than a retry stage's expiry.
fn broker_reason(deaths: &[XDeath]) -> Option<XDeath> {
    deaths.iter().find(|d| d.reason != "expired").cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::to_field_table;

    #[test]
    fn round_trip_keeps_every_diagnostic() {
        let mut headers = Headers::new();
        headers.insert("x-retry-attempt".into(), "2".into());
        let rec = ParkedMessage {
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
        };
        let props = BasicProperties::default()
            .with_message_id(rec.message_id.to_string().into())
            .with_headers(to_field_table(&to_headers(&rec)));
        let back = from_message("inv", &props, "parked", b"{}");
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
        assert!(!back.headers.contains_key(PARKED_AT));
    }
}
