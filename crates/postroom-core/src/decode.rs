//! Decoding an envelope from the wire, with the limits a consumer accepts (R1).
//!
//! Every failure here is permanent: the message goes to the parking lot on its first
//! delivery with the diagnostics, and is never retried.

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
        }
    }
}

/// What a consumer accepts: a body size limit and, per type, a range of schema versions.
#[derive(Debug, Clone)]
pub struct EnvelopeDecoder {
    max_bytes: usize,
    accepted: HashMap<String, RangeInclusive<u32>>,
    accept_any_type: bool,
}

impl Default for EnvelopeDecoder {
    fn default() -> Self {
        Self::new()
    }
}

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
        }
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

    /// Set the body size limit.
    #[must_use]
    pub fn max_bytes(mut self, limit: usize) -> Self {
        self.max_bytes = limit;
        self
    }

    /// The body size limit.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.max_bytes
    }

    /// Decode and validate a body.
    pub fn decode(&self, body: &[u8]) -> Result<Envelope, DecodeError> {
        if body.len() > self.max_bytes {
            return Err(DecodeError::Oversize {
                size: body.len(),
                limit: self.max_bytes,
            });
        }
        let envelope: Envelope =
            serde_json::from_slice(body).map_err(|e| DecodeError::Malformed(e.to_string()))?;
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
    fn ids_sort_by_time() {
        let a = crate::MessageId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = crate::MessageId::new();
        assert!(a < b);
    }
}
