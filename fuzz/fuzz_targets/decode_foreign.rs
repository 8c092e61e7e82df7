//! A received message given to a decoder that also reads foreign bodies (a JSON body with
//! its id in a header): an envelope or a classified error, never a panic; the same message
//! always gets the same id.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use postroom_core::{EnvelopeDecoder, ForeignFormat, Headers, ReceivedMessage};

#[derive(Arbitrary, Debug)]
struct Input {
    /// Headers; the names the decoder reads are likely picks.
    headers: Vec<(HeaderName, String)>,
    body: Vec<u8>,
    routing_key: String,
}

#[derive(Arbitrary, Debug)]
enum HeaderName {
    Id,
    Type,
    Producer,
    Correlation,
    Other(String),
}

impl HeaderName {
    fn text(&self) -> String {
        match self {
            Self::Id => "x-external-id".into(),
            Self::Type => "x-type".into(),
            Self::Producer => "x-producer".into(),
            Self::Correlation => "x-correlation-id".into(),
            Self::Other(s) => s.clone(),
        }
    }
}

fuzz_target!(|input: Input| {
    let headers: Headers = input
        .headers
        .iter()
        .map(|(k, v)| (k.text(), v.clone()))
        .collect();
    let msg = ReceivedMessage::new(None, input.routing_key, headers, input.body);
    let decoder = EnvelopeDecoder::accepting("order.created", 1..=1).foreign(
        ForeignFormat::new("x-external-id", "payment.captured")
            .type_header("x-type")
            .key_field("payment"),
    );
    let first = decoder.decode_message(&msg);
    let second = decoder.decode_message(&msg);
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert_eq!(a.id, b.id, "a stable id"),
        (Err(a), Err(b)) => assert_eq!(a.code(), b.code()),
        _ => panic!("the same message decoded two ways: {first:?} / {second:?}"),
    }
    let _ = msg.stable_id();
});
