//! postroom headers as Kafka record headers, and the headers only the Kafka transport sets:
//! the message id (Kafka has no message id property) and the due time of a retry copy.

use postroom_core::{Headers, MessageId};
use rdkafka::message::{Header, OwnedHeaders};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The postroom message id of a record.
pub const MESSAGE_ID: &str = "x-message-id";
/// When a retry copy may be handled, in milliseconds since the Unix epoch; never earlier.
pub const DUE_AT: &str = "x-due-at";
/// Set on a copy that was sent to the retry path behind an earlier record of its key (per-key
/// ordered retry) without being handled: the id of the record it follows.
pub const FOLLOWS: &str = "x-follows";

/// Record headers from postroom headers plus the message id.
#[must_use]
pub fn to_record(id: MessageId, headers: &Headers) -> OwnedHeaders {
    let id = id.to_string();
    let mut out = OwnedHeaders::new_with_capacity(headers.len() + 1);
    out = out.insert(Header {
        key: MESSAGE_ID,
        value: Some(id.as_str()),
    });
    for (k, v) in headers {
        if k == MESSAGE_ID {
            continue;
        }
        out = out.insert(Header {
            key: k.as_str(),
            value: Some(v.as_str()),
        });
    }
    out
}

/// postroom headers of a record (values that are not UTF-8 are skipped), and its message id.
#[must_use]
pub fn from_record<H: rdkafka::message::Headers>(
    headers: Option<&H>,
) -> (Option<MessageId>, Headers) {
    let mut out = Headers::new();
    let mut id = None;
    if let Some(hs) = headers {
        for h in hs.iter() {
            let Some(Ok(v)) = h.value.map(std::str::from_utf8) else {
                continue;
            };
            if h.key == MESSAGE_ID {
                id = v.parse().ok();
            } else {
                out.insert(h.key.to_string(), v.to_string());
            }
        }
    }
    (id, out)
}

/// Milliseconds since the Unix epoch of `t`.
#[must_use]
pub fn epoch_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The due time in `headers`, when there is one.
#[must_use]
pub fn due_at(headers: &Headers) -> Option<SystemTime> {
    headers
        .get(DUE_AT)
        .and_then(|v| v.parse::<u64>().ok())
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
}

/// Set the due time of a copy to `delay` from now, rounded up to the next millisecond so the
/// copy is never handled before `delay` has passed.
pub fn set_due_in(headers: &mut Headers, delay: Duration) {
    let due = SystemTime::now() + delay + Duration::from_millis(1);
    headers.insert(DUE_AT.into(), epoch_millis(due).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_headers_and_id() {
        let id = MessageId::new();
        let mut h = Headers::new();
        h.insert("x-retry-attempt".into(), "2".into());
        set_due_in(&mut h, Duration::from_secs(5));
        let rec = to_record(id, &h);
        let (back_id, back) = from_record(Some(&rec));
        assert_eq!(back_id, Some(id));
        assert_eq!(back, h);
        let due = due_at(&back).unwrap();
        assert!(due >= SystemTime::now() + Duration::from_millis(4900));
    }
}
