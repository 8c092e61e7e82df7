//! postroom headers as NATS headers and back. The stable id travels in its own header (the
//! `Nats-Msg-Id` is the stream's deduplication key, which differs for copies addressed to one
//! consumer); `Nats-*` headers are the transport's and never reach postroom's maps.

use async_nats::{HeaderMap, HeaderName};
use postroom_core::{Error, ErrorKind, Headers, MessageId, Result};

/// The header carrying the stable message id.
pub const MESSAGE_ID: &str = "x-message-id";
/// The stream's deduplication key.
pub const NATS_MSG_ID: &str = "Nats-Msg-Id";

/// NATS headers for `headers` plus the id and the deduplication key. A header name NATS
/// cannot carry (`:`, control or non-ASCII characters) is refused as invalid data.
pub fn to_nats(id: MessageId, dedup_key: Option<&str>, headers: &Headers) -> Result<HeaderMap> {
    let mut out = HeaderMap::new();
    for (k, v) in headers {
        if is_transport_header(k) {
            continue;
        }
        let name = HeaderName::try_from(k.as_str()).map_err(|e| {
            Error::new(
                ErrorKind::InvalidData,
                format!("header name {k:?} cannot travel on NATS: {e}"),
            )
        })?;
        // Header values cannot hold line breaks.
        out.insert(name, v.replace(['\r', '\n'], " ").as_str());
    }
    out.insert(MESSAGE_ID, id.to_string().as_str());
    if let Some(k) = dedup_key {
        out.insert(NATS_MSG_ID, k);
    }
    Ok(out)
}

/// postroom's headers of a NATS message, and its stable id (the id header, else a
/// `Nats-Msg-Id` that is an id).
#[must_use]
pub fn from_nats(h: Option<&HeaderMap>) -> (Option<MessageId>, Headers) {
    let mut out = Headers::new();
    let mut id = None;
    let mut msg_id = None;
    if let Some(h) = h {
        for (name, values) in h.iter() {
            let Some(last) = values.last() else { continue };
            let k = name.to_string();
            if k.eq_ignore_ascii_case(MESSAGE_ID) {
                id = last.as_str().parse::<MessageId>().ok();
            } else if k.eq_ignore_ascii_case(NATS_MSG_ID) {
                msg_id = last.as_str().parse::<MessageId>().ok();
            } else if !is_transport_header(&k) {
                out.insert(k, last.as_str().to_string());
            }
        }
    }
    (id.or(msg_id), out)
}

fn is_transport_header(k: &str) -> bool {
    k.len() >= 5 && k[..5].eq_ignore_ascii_case("nats-") || k.eq_ignore_ascii_case(MESSAGE_ID)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_postroom_headers_and_the_id() {
        let id = MessageId::new();
        let mut h = Headers::new();
        h.insert("x-retry-attempt".into(), "2".into());
        h.insert("x-last-error".into(), "line one\nline two".into());
        h.insert("Nats-Expected-Stream".into(), "x".into());
        let nats = to_nats(id, Some("k"), &h).unwrap();
        let (back_id, back) = from_nats(Some(&nats));
        assert_eq!(back_id, Some(id));
        assert_eq!(back.get("x-retry-attempt").map(String::as_str), Some("2"));
        assert_eq!(
            back.get("x-last-error").map(String::as_str),
            Some("line one line two")
        );
        assert!(!back.keys().any(|k| k.starts_with("Nats")));
        h.insert("bad:name".into(), "v".into());
        assert!(to_nats(id, Some("k"), &h).is_err());
    }
}
