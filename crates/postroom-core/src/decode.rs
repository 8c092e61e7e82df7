//! Decoding an envelope from the wire, with the limits a consumer accepts.
//!
//! Every failure here is permanent: the message goes to the parking lot on its first
//! delivery with the diagnostics, and is never retried.
//!
//! Bodies that are not postroom envelopes (another language's producer, a topic fed by
//! something else) are accepted with [`EnvelopeDecoder::foreign`]: a JSON body whose message
//! id comes from a header. Their id becomes a stable postroom id (the id itself when it is a
//! UUID, else one derived from it, the same every time), so the inbox deduplicates them like
//! any other message, and retries and parking keep it.

use crate::envelope::Envelope;
use std::collections::HashMap;
use std::ops::RangeInclusive;

/// Why a body could not become an [`Envelope`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The body is larger than the configured limit.
    #[error("message body is {size} bytes, over the limit of {limit} bytes")]
    Oversize {
        /// Body size.
        size: usize,
        /// Limit.
        limit: usize,
    },
    /// The body is not a valid envelope (bad JSON or missing fields).
    #[error("undecodable body: {0}")]
    Malformed(String),
    /// The type is known but this schema version is not.
    #[error("unknown schema_version {version} for type {message_type} (accepted: {accepted})")]
    UnknownSchemaVersion {
        /// Message type.
        message_type: String,
        /// Version found.
        version: u32,
        /// Accepted versions, for the diagnostic.
        accepted: String,
    },
    /// No handler accepts this message type.
    #[error("unknown message type {0}")]
    UnknownType(String),
    /// A foreign message without its id header.
    #[error("the message has no id: expected a header {0:?} with a unique id")]
    MissingId(String),
}

impl DecodeError {
    /// A short stable name for the error class, stored with parked messages.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            DecodeError::Oversize { .. } => "oversize",
            DecodeError::Malformed(_) => "malformed",
            DecodeError::UnknownSchemaVersion { .. } => "unknown_schema_version",
            DecodeError::UnknownType(_) => "unknown_type",
            DecodeError::MissingId(_) => "missing_id",
        }
    }
}

/// The text of a serde error with the payload's values taken out: `invalid type: string
/// "card 4111 1111 1111 1111", expected u32` becomes `invalid type: string, expected u32`,
/// and `path` (where in the body it happened, e.g. `data.qty`) is put first. What is kept
/// comes from the schema (the expected type, field and variant names, lengths, the line
/// and column); what is taken out comes from the message (strings, numbers, an unknown
/// variant). Quoted text in other messages (a type's own error) is replaced by `…`.
/// Parked messages store this text, and everyone who reads the parking lot sees it.
#[must_use]
pub fn redacted_error(path: &str, e: &serde_json::Error) -> String {
    let full = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    let (message, position) = match full.strip_suffix(&position) {
        Some(m) if e.line() > 0 => (m, position.as_str()),
        _ => (full.as_str(), ""),
    };
    let message = without_values(message);
    match path {
        "" | "." | "?" => format!("{message}{position}"),
        path => format!("{path}: {message}{position}"),
    }
}

/// `message` (serde's wording) without the values it quotes.
fn without_values(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            // `string "…"`, `integer `5``, `map`: the kind is the words before the value.
            return match rest.rfind(", expected ") {
                Some(at) => {
                    let unexpected = &rest[..at];
                    let kind = unexpected.split(['`', '"']).next().unwrap_or("").trim();
                    let kind = if kind.chars().all(|c| c.is_alphabetic() || c == ' ') {
                        kind
                    } else {
                        "a value"
                    };
                    format!("{prefix}{kind}{}", &rest[at..])
                }
                None => format!("{prefix}(value not shown)"),
            };
        }
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        return match rest
            .rfind(", expected ")
            .or_else(|| rest.rfind(", there are no variants"))
        {
            Some(at) => format!("unknown variant{}", &rest[at..]),
            None => "unknown variant".into(),
        };
    }
    let structural = [
        "missing field ",
        "duplicate field ",
        "unknown field ",
        "invalid length ",
    ];
    if structural.iter().any(|p| message.starts_with(p)) {
        return message.to_string();
    }
    without_quoted(message)
}

/// `text` with each span in double quotes or backticks replaced by `…`.
fn without_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut open: Option<char> = None;
    for c in text.chars() {
        match open {
            Some(q) if c == q => {
                out.push(c);
                open = None;
            }
            Some(_) => {}
            None if c == '"' || c == '`' => {
                out.push(c);
                out.push('…');
                open = Some(c);
            }
            None => out.push(c),
        }
    }
    out
}

/// Deserialize `T` from `de`; on failure, the error [`redacted_error`] writes, with the
/// path found by reading `again` (the same input, read a second time only on failure so
/// that the path costs nothing when decoding succeeds).
pub(crate) fn deserialize_redacted<'de, T, D>(
    first: std::result::Result<T, serde_json::Error>,
    again: D,
) -> std::result::Result<T, String>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de, Error = serde_json::Error>,
{
    let e = match first {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    match serde_path_to_error::deserialize::<_, T>(again) {
        Err(traced) => Err(redacted_error(&traced.path().to_string(), traced.inner())),
        // Read without the path it failed, with it not: report the first failure.
        Ok(_) => Err(redacted_error("", &e)),
    }
}

/// How to read bodies that are not postroom envelopes: a JSON body, its id in a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignFormat {
    /// Header holding the producer's unique message id (any string).
    pub id_header: String,
    /// Header naming the message type, when the producer sends one.
    pub type_header: Option<String>,
    /// Message type of messages without a type header.
    pub message_type: String,
    /// Top-level field of the body holding the aggregate (ordering) id; without it the
    /// message id is used.
    pub key_field: Option<String>,
}

impl ForeignFormat {
    /// Messages of `message_type` with their id in the header `id_header`.
    #[must_use]
    pub fn new(id_header: impl Into<String>, message_type: impl Into<String>) -> Self {
        Self {
            id_header: id_header.into(),
            type_header: None,
            message_type: message_type.into(),
            key_field: None,
        }
    }

    /// Read the type from this header when present.
    #[must_use]
    pub fn type_header(mut self, header: impl Into<String>) -> Self {
        self.type_header = Some(header.into());
        self
    }

    /// Read the aggregate id from this top-level field of the body.
    #[must_use]
    pub fn key_field(mut self, field: impl Into<String>) -> Self {
        self.key_field = Some(field.into());
        self
    }
}

/// What a consumer accepts: a body size limit and, per type, a range of schema versions.
#[derive(Debug, Clone)]
pub struct EnvelopeDecoder {
    max_bytes: usize,
    accepted: HashMap<String, RangeInclusive<u32>>,
    accept_any_type: bool,
    foreign: Option<ForeignFormat>,
}

impl Default for EnvelopeDecoder {
    fn default() -> Self {
        Self::new()
    }
}

crate::setters!(EnvelopeDecoder {
    /// Set the body size limit.
    max_bytes: usize,
});

impl EnvelopeDecoder {
    /// Default limit: 256 KiB (the SQS maximum, and a sane one everywhere).
    pub const DEFAULT_MAX_BYTES: usize = 256 * 1024;

    /// A decoder that accepts no types until [`accept`](Self::accept) is called.
    #[must_use]
    pub fn new() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
            accepted: HashMap::new(),
            accept_any_type: false,
            foreign: None,
        }
    }

    /// A decoder that accepts exactly `message_type` at `versions` (the usual consumer of one
    /// kind of message); more with [`accept`](Self::accept).
    #[must_use]
    pub fn accepting(message_type: impl Into<String>, versions: RangeInclusive<u32>) -> Self {
        Self::new().accept(message_type, versions)
    }

    /// Also accept bodies that are not postroom envelopes, read as `format` says (at schema
    /// version 1 of their type, which is accepted too). Postroom envelopes are still read as
    /// such.
    #[must_use]
    pub fn foreign(mut self, format: ForeignFormat) -> Self {
        self.accepted
            .entry(format.message_type.clone())
            .or_insert(1..=1);
        self.foreign = Some(format);
        self
    }

    /// Accept `message_type` with schema versions in `versions`.
    #[must_use]
    pub fn accept(
        mut self,
        message_type: impl Into<String>,
        versions: RangeInclusive<u32>,
    ) -> Self {
        self.accepted.insert(message_type.into(), versions);
        self
    }

    /// Accept every type at every version (tools such as parking ingest).
    #[must_use]
    pub fn accept_anything(mut self) -> Self {
        self.accept_any_type = true;
        self
    }

    /// The body size limit.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.max_bytes
    }

    /// Decode and validate a received message: a postroom envelope, or — with
    /// [`foreign`](Self::foreign) — a foreign JSON body with its id in a header.
    pub fn decode_message(
        &self,
        msg: &crate::transport::ReceivedMessage,
    ) -> Result<Envelope, DecodeError> {
        let Some(format) = &self.foreign else {
            return self.decode(&msg.body);
        };
        match self.decode(&msg.body) {
            Err(DecodeError::Malformed(_)) => self.decode_foreign(format, msg),
            other => other,
        }
    }

    fn decode_foreign(
        &self,
        format: &ForeignFormat,
        msg: &crate::transport::ReceivedMessage,
    ) -> Result<Envelope, DecodeError> {
        let data: serde_json::Value = serde_json::from_slice(&msg.body)
            .map_err(|e| DecodeError::Malformed(format!("not JSON: {}", redacted_error("", &e))))?;
        let raw_id = msg
            .headers
            .get(&format.id_header)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| DecodeError::MissingId(format.id_header.clone()))?;
        let id = raw_id.parse::<crate::MessageId>().unwrap_or_else(|_| {
            crate::MessageId::derived_from(format!("foreign:{raw_id}").as_bytes())
        });
        let message_type = format
            .type_header
            .as_ref()
            .and_then(|h| msg.headers.get(h))
            .cloned()
            .unwrap_or_else(|| format.message_type.clone());
        let key = format
            .key_field
            .as_ref()
            .and_then(|f| data.get(f))
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_else(|| raw_id.clone());
        let mut b = Envelope::builder(
            message_type,
            msg.headers
                .get(crate::message::headers::PRODUCER)
                .cloned()
                .unwrap_or_else(|| "foreign".into()),
        )
        .id(id)
        .aggregate(format.message_type.clone(), key, 0)
        .data(data);
        if let Some(c) = msg.headers.get(crate::message::headers::CORRELATION_ID) {
            b = b.correlation_id(c.clone());
        }
        let envelope = b.build();
        self.check_type(envelope)
    }

    fn check_type(&self, envelope: Envelope) -> Result<Envelope, DecodeError> {
        if self.accept_any_type {
            return Ok(envelope);
        }
        match self.accepted.get(&envelope.message_type) {
            None => Err(DecodeError::UnknownType(envelope.message_type)),
            Some(range) if !range.contains(&envelope.schema_version) => {
                Err(DecodeError::UnknownSchemaVersion {
                    accepted: format!("{}..={}", range.start(), range.end()),
                    message_type: envelope.message_type,
                    version: envelope.schema_version,
                })
            }
            Some(_) => Ok(envelope),
        }
    }

    /// Decode and validate a body.
    pub fn decode(&self, body: &[u8]) -> Result<Envelope, DecodeError> {
        if body.len() > self.max_bytes {
            return Err(DecodeError::Oversize {
                size: body.len(),
                limit: self.max_bytes,
            });
        }
        let envelope: Envelope = deserialize_redacted(
            serde_json::from_slice(body),
            &mut serde_json::Deserializer::from_slice(body),
        )
        .map_err(DecodeError::Malformed)?;
        self.check_type(envelope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        Envelope::builder("order.created", "orders")
            .aggregate("order", "o-1", 1)
            .data(serde_json::json!({"sku": "A", "qty": 2}))
            .build()
    }

    #[test]
    fn round_trip_and_unknown_fields_ignored() {
        let env = sample();
        let mut v: serde_json::Value = serde_json::from_slice(&env.to_bytes()).unwrap();
        v["some_future_field"] = serde_json::json!({"x": 1});
        let body = serde_json::to_vec(&v).unwrap();
        let dec = EnvelopeDecoder::new().accept("order.created", 1..=1);
        assert_eq!(dec.decode(&body).unwrap(), env);
    }

    #[test]
    fn a_number_with_more_digits_than_a_double_holds_re_encodes_to_the_same_envelope() {
        // Found by the `envelope_decode` fuzz target: the relay and a redrive republish what a
        // consumer decoded, so a decoded envelope must decode again to itself. A decimal with
        // more digits than a double keeps must be rounded to the nearest double, or printing
        // and reading it again lands one unit away.
        let body = br#"{"id":"01890f3e-6c1a-7cc2-9d40-0a1b2c3d4e60","type":"order.created","schema_version":1,"occurred_at":"2026-05-01T10:00:00Z","producer":"orders","aggregate":{"type":"order","id":"od-2","version":3},"data":[1,2.184467440737095516155,null,"x"]}"#;
        let dec = EnvelopeDecoder::new().accept_anything();
        let envelope = dec.decode(body).unwrap();
        assert_eq!(dec.decode(&envelope.to_bytes()).unwrap(), envelope);
    }

    #[test]
    fn unknown_version_is_rejected_with_diagnostics() {
        let env = Envelope::builder("order.created", "orders")
            .schema_version(7)
            .aggregate("order", "o", 1)
            .build();
        let err = EnvelopeDecoder::new()
            .accept("order.created", 1..=2)
            .decode(&env.to_bytes())
            .unwrap_err();
        assert_eq!(err.code(), "unknown_schema_version");
        assert!(err.to_string().contains("7"), "{err}");
    }

    #[test]
    fn corrupt_and_oversize() {
        let dec = EnvelopeDecoder::new()
            .accept("order.created", 1..=1)
            .max_bytes(64);
        assert_eq!(dec.decode(b"{not json").unwrap_err().code(), "malformed");
        assert_eq!(dec.decode(&[b' '; 65]).unwrap_err().code(), "oversize");
        assert_eq!(
            dec.decode(br#"{"id":"nope"}"#).unwrap_err().code(),
            "malformed"
        );
    }

    #[test]
    fn a_foreign_body_with_a_string_id_in_a_header_gets_a_stable_postroom_id() {
        let dec = EnvelopeDecoder::new()
            .foreign(ForeignFormat::new("x-message-id", "payment.captured").key_field("payment"));
        let mut headers = crate::Headers::new();
        headers.insert("x-message-id".into(), "pay-0042".into());
        let msg = crate::ReceivedMessage::new(
            None,
            "payments",
            headers.clone(),
            br#"{"payment":"p-7","amount":12}"#.to_vec(),
        );
        let a = dec.decode_message(&msg).unwrap();
        let b = dec.decode_message(&msg).unwrap();
        assert_eq!(a.id, b.id, "the same string id gives the same postroom id");
        assert_eq!(a.message_type, "payment.captured");
        assert_eq!(a.aggregate.id, "p-7");
        assert_eq!(a.data["amount"], 12);
        let no_id =
            crate::ReceivedMessage::new(None, "payments", crate::Headers::new(), b"{}".to_vec());
        assert_eq!(dec.decode_message(&no_id).unwrap_err().code(), "missing_id");
        let env = Envelope::builder("payment.captured", "p")
            .aggregate("p", "1", 1)
            .build();
        let native = crate::ReceivedMessage::new(Some(env.id), "payments", headers, env.to_bytes());
        assert_eq!(
            dec.decode_message(&native).unwrap().id,
            env.id,
            "envelopes still read as such"
        );
    }

    #[test]
    fn a_decode_error_names_the_path_and_the_expected_type_never_the_value() {
        let dec = EnvelopeDecoder::new().accept_anything();
        let mut v: serde_json::Value = serde_json::from_slice(&sample().to_bytes()).unwrap();
        v["schema_version"] = "card 4111 1111 1111 1111".into();
        let err = dec.decode(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        let text = err.to_string();
        assert_eq!(err.code(), "malformed");
        assert!(!text.contains("4111"), "{text}");
        assert!(
            text.contains("schema_version: invalid type: string, expected u32 at line 1"),
            "{text}"
        );
        v["schema_version"] = 1.into();
        v["aggregate"]["version"] = (-4111_i64).into();
        let text = dec
            .decode(&serde_json::to_vec(&v).unwrap())
            .unwrap_err()
            .to_string();
        assert!(!text.contains("4111"), "{text}");
        assert!(
            text.contains("aggregate.version: invalid value: integer, expected u64"),
            "{text}"
        );
        v["aggregate"]["version"] = 1.into();
        v["id"] = "4111-1111-1111-1111".into();
        let text = dec
            .decode(&serde_json::to_vec(&v).unwrap())
            .unwrap_err()
            .to_string();
        assert!(!text.contains("4111"), "{text}");
        assert!(text.starts_with("undecodable body: id: "), "{text}");
    }

    #[test]
    fn a_typed_payload_that_does_not_fit_is_named_by_path_without_its_value() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Order {
            lines: Vec<Line>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Line {
            qty: u32,
        }
        let env = Envelope::builder("order.created", "orders")
            .aggregate("order", "o-1", 1)
            .data(serde_json::json!({"lines": [{"qty": 1}, {"qty": "card 4111 1111 1111 1111"}]}))
            .build();
        let e = env.data_as::<Order>().unwrap_err();
        let text = format!("{e:?}");
        assert!(!text.contains("4111"), "{text}");
        assert!(
            text.contains("lines[1].qty: invalid type: string, expected u32"),
            "{text}"
        );
    }

    #[test]
    fn serde_wordings_keep_what_the_schema_says() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        enum Kind {
            Card,
            Cash,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        #[serde(deny_unknown_fields)]
        struct Payment {
            kind: Kind,
            amount: u32,
            tags: [u8; 2],
        }
        let redacted = |body: &str| {
            deserialize_redacted::<Payment, _>(
                serde_json::from_str(body),
                &mut serde_json::Deserializer::from_str(body),
            )
            .unwrap_err()
        };
        let cases = [
            (
                r#"{"kind":"alice@example.com","amount":1,"tags":[1,2]}"#,
                "kind: unknown variant, expected `Card` or `Cash`",
            ),
            (
                r#"{"kind":"Card","amount":true,"tags":[1,2]}"#,
                "amount: invalid type: boolean, expected u32",
            ),
            (
                r#"{"kind":"Card","amount":1.5,"tags":[1,2]}"#,
                "amount: invalid type: floating point, expected u32",
            ),
            (
                r#"{"kind":"Card","amount":1,"tags":[1]}"#,
                "tags: invalid length 1, expected an array of length 2",
            ),
            (r#"{"kind":"Card","tags":[1,2]}"#, "missing field `amount`"),
            (
                r#"{"kind":"Card","amount":1,"tags":[1,2],"x":1}"#,
                "unknown field `x`",
            ),
            (
                r#"{"kind":"Card","amount":1,"tags":[1,2]} 4111"#,
                "trailing characters",
            ),
        ];
        for (body, want) in cases {
            let got = redacted(body);
            assert!(got.contains(want), "{body}: {got}");
            assert!(
                !got.contains("alice") && !got.contains("1.5") && !got.contains("4111"),
                "{got}"
            );
        }
        assert_eq!(
            without_quoted(r#"found `Z` in "card 4111" at 3"#),
            r#"found `…` in "…" at 3"#
        );
    }

    #[test]
    fn ids_sort_by_time() {
        let a = crate::MessageId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = crate::MessageId::new();
        assert!(a < b);
    }
}
