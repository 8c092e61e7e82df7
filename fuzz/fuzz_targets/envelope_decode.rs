//! Any body given to the envelope decoder: a decoded envelope or a classified error, never a
//! panic; a decoded envelope re-encodes to the same envelope (the relay and a redrive
//! republish what a consumer decoded).
#![no_main]

use libfuzzer_sys::fuzz_target;
use postroom_core::EnvelopeDecoder;

fuzz_target!(|body: &[u8]| {
    let strict = EnvelopeDecoder::accepting("order.created", 1..=2).max_bytes(64 * 1024);
    let _ = strict.decode(body).map_err(|e| e.code());
    let any = EnvelopeDecoder::new().accept_anything();
    if let Ok(envelope) = any.decode(body) {
        let again = any
            .decode(&envelope.to_bytes())
            .expect("a decoded envelope decodes again");
        assert_eq!(again, envelope, "re-encoding changes nothing");
    }
});
