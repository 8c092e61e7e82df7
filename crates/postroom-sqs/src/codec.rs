//! postroom's message parts as SQS message attributes and body, and back.
//!
//! SQS allows at most 10 message attributes per message, and a parking copy carries some 20
//! headers (every diagnostic), so headers are not one attribute each: they travel packed as
//! one JSON object in the `postroom.headers` attribute. Beside it: `postroom.id` (the stable
//! id; the SQS `MessageId` is new on every send), `postroom.route` (the topic it was published
//! to) and, only for a body that SQS cannot carry as text, `postroom.body` = `base64`. That
//! leaves six attributes free for other producers; their String and Number attributes are read
//! as headers too. Attribute names and values count toward the message size.
//!
//! A body must be Unicode text of the characters XML allows (tab, line feed, carriage return,
//! U+0020 and above, minus U+FFFE/U+FFFF); any other body (binary, a NUL byte) is sent base64
//! encoded and decoded again on receipt, so nothing is lost or refused.

use aws_sdk_sqs::types::MessageAttributeValue;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use postroom_core::{Error, ErrorKind, Headers, MessageId, Result};
use std::collections::HashMap;

/// The stable message id.
pub const ATTR_ID: &str = "postroom.id";
/// The topic the message was published to.
pub const ATTR_ROUTE: &str = "postroom.route";
/// Every header, as one JSON object.
pub const ATTR_HEADERS: &str = "postroom.headers";
/// `base64` when the body is base64 encoded.
pub const ATTR_BODY: &str = "postroom.body";

/// A message's parts as SQS will carry them.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// The body text.
    pub body: String,
    /// The message attributes.
    pub attributes: HashMap<String, MessageAttributeValue>,
    /// Body and attribute bytes, as SQS counts them against its size limits.
    pub size: usize,
}

fn text_attribute(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .expect("data type is set")
}

/// Whether SQS takes `c` in a body or attribute value.
fn sqs_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// Encode a message: its id, the route it was published to, its headers and body.
pub fn encode(id: MessageId, route: &str, headers: &Headers, body: &[u8]) -> Result<Encoded> {
    let mut attributes = HashMap::new();
    let mut size = 0;
    let mut put = |name: &str, value: String| {
        size += name.len() + "String".len() + value.len();
        attributes.insert(name.to_string(), text_attribute(&value));
    };
    put(ATTR_ID, id.to_string());
    if !route.is_empty() {
        put(ATTR_ROUTE, route.to_string());
    }
    if !headers.is_empty() {
        let json = serde_json::to_string(headers)
            .map_err(|e| Error::new(ErrorKind::InvalidData, format!("headers as JSON: {e}")))?;
        if !json.chars().all(sqs_char) {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "a header holds a character SQS cannot carry",
            ));
        }
        put(ATTR_HEADERS, json);
    }
    let body = match std::str::from_utf8(body) {
        Ok(text) if text.chars().all(sqs_char) && !text.is_empty() => text.to_string(),
        _ => {
            put(ATTR_BODY, "base64".into());
            // SQS refuses an empty body; base64 of nothing is empty too, so mark it.
            if body.is_empty() {
                "=".into()
            } else {
                B64.encode(body)
            }
        }
    };
    size += body.len();
    Ok(Encoded {
        body,
        attributes,
        size,
    })
}

/// What a received message says of itself.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    /// The stable id, when the message carries one.
    pub id: Option<MessageId>,
    /// The topic it was published to.
    pub route: Option<String>,
    /// Headers: postroom's, then other producers' text attributes.
    pub headers: Headers,
    /// The body bytes.
    pub body: Vec<u8>,
}

/// Decode a received message. Never fails: unreadable parts are kept as they arrived (an
/// unreadable header object becomes the `x-unreadable-headers` header, for diagnostics).
#[must_use]
pub fn decode(body: &str, attributes: Option<&HashMap<String, MessageAttributeValue>>) -> Decoded {
    let mut out = Decoded::default();
    let text = |name: &str| {
        attributes
            .and_then(|a| a.get(name))
            .and_then(MessageAttributeValue::string_value)
    };
    out.id = text(ATTR_ID).and_then(|v| v.parse().ok());
    out.route = text(ATTR_ROUTE).map(str::to_string);
    if let Some(json) = text(ATTR_HEADERS) {
        match serde_json::from_str::<Headers>(json) {
            Ok(h) => out.headers = h,
            Err(_) => {
                out.headers
                    .insert("x-unreadable-headers".into(), json.to_string());
            }
        }
    }
    for (name, value) in attributes.into_iter().flatten() {
        if name.starts_with("postroom.") {
            continue;
        }
        if let Some(v) = value.string_value() {
            out.headers
                .entry(name.clone())
                .or_insert_with(|| v.to_string());
        }
    }
    out.body = if text(ATTR_BODY) == Some("base64") {
        if body == "=" {
            Vec::new()
        } else {
            B64.decode(body)
                .unwrap_or_else(|_| body.as_bytes().to_vec())
        }
    } else {
        body.as_bytes().to_vec()
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_text_and_binary_bodies_with_every_header() {
        let id = MessageId::new();
        let mut headers = Headers::new();
        for i in 0..25 {
            headers.insert(format!("x-h{i}"), format!("v{i}"));
        }
        let e = encode(id, "order.created", &headers, b"{\"a\":1}").unwrap();
        assert_eq!(e.body, "{\"a\":1}");
        assert!(
            e.attributes.len() <= 4,
            "packed under the 10-attribute limit"
        );
        let d = decode(&e.body, Some(&e.attributes));
        assert_eq!(d.id, Some(id));
        assert_eq!(d.route.as_deref(), Some("order.created"));
        assert_eq!(d.headers, headers);
        assert_eq!(d.body, b"{\"a\":1}");

        for raw in [&b"\x00\xff binary"[..], b"", b"nul\x00in text"] {
            let e = encode(id, "", &Headers::new(), raw).unwrap();
            assert!(e.body.chars().all(sqs_char));
            assert_eq!(decode(&e.body, Some(&e.attributes)).body, raw);
        }
    }

    #[test]
    fn foreign_messages_keep_their_text_attributes() {
        let mut attrs = HashMap::new();
        attrs.insert("trace".to_string(), text_attribute("t-1"));
        let d = decode("hello", Some(&attrs));
        assert_eq!(d.id, None);
        assert_eq!(d.headers.get("trace").map(String::as_str), Some("t-1"));
        assert_eq!(d.body, b"hello");
        assert!(decode("x", None).headers.is_empty());
    }
}
