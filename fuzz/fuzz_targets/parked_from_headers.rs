//! Any headers and body read from a dead-letter place rebuild a parked record, never a
//! panic; the record's error text stays within its limit and no parking-only header leaks
//! into the message's own headers.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use postroom_core::parking::{MAX_ERROR_CHARS, codec};
use postroom_core::{Headers, MessageId};

#[derive(Arbitrary, Debug)]
struct Input {
    consumer: String,
    id: Option<[u8; 16]>,
    routing_key: String,
    headers: Vec<(Name, String)>,
    body: Vec<u8>,
}

/// Header names: the ones the codec reads are likely picks.
#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8),
    Other(String),
}

const KNOWN: [&str; 18] = [
    codec::PARKED_AT,
    codec::PARKED_ATTEMPTS,
    codec::SCHEMA_VERSION,
    codec::DEAD_LETTER_REASON,
    codec::DEAD_LETTERED_FROM,
    codec::DEAD_LETTER_COUNT,
    codec::DEAD_LETTERED_AT,
    postroom_core::message::headers::PARKED_BY,
    postroom_core::message::headers::PARKED_BY_VERSION,
    postroom_core::message::headers::FIRST_FAILURE_AT,
    postroom_core::message::headers::LAST_ERROR_CLASS,
    postroom_core::message::headers::LAST_ERROR_CODE,
    postroom_core::message::headers::LAST_ERROR,
    postroom_core::message::headers::ORIGINAL_ROUTE,
    postroom_core::message::headers::REDRIVE_COUNT,
    postroom_core::message::headers::MESSAGE_TYPE,
    postroom_core::message::headers::CORRELATION_ID,
    postroom_core::message::headers::RETRY_ATTEMPT,
];

fuzz_target!(|input: Input| {
    let headers: Headers = input
        .headers
        .into_iter()
        .map(|(k, v)| {
            let k = match k {
                Name::Known(i) => KNOWN[usize::from(i) % KNOWN.len()].to_string(),
                Name::Other(s) => s,
            };
            (k, v)
        })
        .collect();
    let id = input.id.map(|b| MessageId::from(uuid::Uuid::from_bytes(b)));
    let record = codec::from_headers(
        &input.consumer,
        id,
        &input.routing_key,
        &headers,
        &input.body,
    );
    assert!(record.error_message.chars().count() <= MAX_ERROR_CHARS + 1);
    assert!(!record.headers.contains_key(codec::PARKED_AT));
    assert!(
        !record
            .headers
            .contains_key(postroom_core::message::headers::PARKED_BY)
    );
    assert_eq!(record.body, input.body);
    if let Some(id) = id {
        assert_eq!(record.message_id, id);
    }
});
