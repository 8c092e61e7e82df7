//! A parked record written as headers (`to_headers`) and read back (`from_headers`) keeps
//! every diagnostic: id, consumer and its version, type and schema version, attempts, first
//! failure and parking times, error class, code and text, correlation and trace ids, original
//! route, producer, redrive count, every header of the message's own and its body.
//!
//! Times are within RFC 3339's years 0000–9999 (the header format), and the message's own
//! headers are not named like the diagnostics (which the codec owns).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use postroom_core::chrono::{DateTime, Utc};
use postroom_core::message::{headers as h, truncate};
use postroom_core::parking::{MAX_ERROR_CHARS, codec};
use postroom_core::{ErrorClass, Headers, MessageId, ParkedMessage, ParkedStatus};

/// Diagnostic header names: owned by the codec.
const OWNED: [&str; 19] = [
    codec::PARKED_AT,
    codec::PARKED_ATTEMPTS,
    codec::SCHEMA_VERSION,
    codec::DEAD_LETTER_REASON,
    codec::DEAD_LETTERED_FROM,
    codec::DEAD_LETTER_COUNT,
    codec::DEAD_LETTERED_AT,
    h::PARKED_BY,
    h::PARKED_BY_VERSION,
    h::FIRST_FAILURE_AT,
    h::LAST_ERROR_CLASS,
    h::LAST_ERROR_CODE,
    h::LAST_ERROR,
    h::ORIGINAL_ROUTE,
    h::REDRIVE_COUNT,
    h::MESSAGE_TYPE,
    h::CORRELATION_ID,
    h::TRACEPARENT,
    h::PRODUCER,
];

fn time(u: &mut Unstructured<'_>) -> arbitrary::Result<DateTime<Utc>> {
    // 0000-01-01 .. 9999-12-31 in seconds since the epoch.
    let secs = u.int_in_range(-62_167_219_200_i64..=253_402_300_799)?;
    let nanos = u.int_in_range(0..=999_999_999_u32)?;
    Ok(DateTime::from_timestamp(secs, nanos).expect("in range"))
}

fn record(u: &mut Unstructured<'_>) -> arbitrary::Result<ParkedMessage> {
    let headers: Headers = Vec::<(String, String)>::arbitrary(u)?
        .into_iter()
        .filter(|(k, _)| !OWNED.contains(&k.as_str()))
        .collect();
    let error_class = match u.int_in_range(0..=2_u8)? {
        0 => ErrorClass::Transient,
        1 => ErrorClass::Permanent,
        _ => ErrorClass::Unknown,
    };
    Ok(ParkedMessage {
        message_id: MessageId::from(uuid::Uuid::from_bytes(u.arbitrary()?)),
        consumer: u.arbitrary()?,
        consumer_version: u.arbitrary()?,
        message_type: u.arbitrary()?,
        schema_version: u.arbitrary()?,
        attempts: u.arbitrary()?,
        first_failure_at: time(u)?,
        parked_at: time(u)?,
        error_class,
        error_code: u.arbitrary()?,
        error_message: truncate(&String::arbitrary(u)?, MAX_ERROR_CHARS),
        correlation_id: u.arbitrary()?,
        traceparent: u.arbitrary()?,
        routing_key: u.arbitrary()?,
        producer: u.arbitrary()?,
        headers,
        body: u.arbitrary()?,
        status: ParkedStatus::Parked,
        redrive_count: u.arbitrary()?,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(rec) = record(&mut u) else { return };
    let Ok(read_from) = String::arbitrary(&mut u) else {
        return;
    };
    let back = codec::from_headers(
        &read_from,
        Some(rec.message_id),
        "parked",
        &codec::to_headers(&rec),
        &rec.body,
    );
    assert_eq!(back.message_id, rec.message_id);
    assert_eq!(back.consumer, rec.consumer);
    assert_eq!(back.consumer_version, rec.consumer_version);
    assert_eq!(back.message_type, rec.message_type);
    assert_eq!(back.schema_version, rec.schema_version);
    assert_eq!(back.attempts, rec.attempts);
    assert_eq!(back.first_failure_at, rec.first_failure_at);
    assert_eq!(back.parked_at, rec.parked_at);
    assert_eq!(back.error_class, rec.error_class);
    assert_eq!(back.error_code, rec.error_code);
    assert_eq!(back.error_message, rec.error_message);
    assert_eq!(back.correlation_id, rec.correlation_id);
    assert_eq!(back.traceparent, rec.traceparent);
    assert_eq!(back.routing_key, rec.routing_key);
    assert_eq!(back.producer, rec.producer);
    assert_eq!(back.redrive_count, rec.redrive_count);
    // The diagnostics that follow a message through retries and redrives (first failure,
    // last error, redrive count, …) stay among its headers; its own headers are all there.
    let own: Headers = back
        .headers
        .iter()
        .filter(|(k, _)| !OWNED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(own, rec.headers);
    assert_eq!(back.body, rec.body);
});
