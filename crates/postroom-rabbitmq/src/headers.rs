//! AMQP header tables to and from postroom's portable string headers, and the broker's
//! `x-death` record (read for diagnostics and for the reject+DLX loop count, never as the
//! attempt counter of ack+publish).

use chrono::{DateTime, TimeZone, Utc};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use postroom_core::Headers;

/// Headers the broker owns: a copy that carried one would be read as the broker's own
/// (a retry copy or a redriven message carrying the `x-delivery-count` of the delivery it
/// was made from would look delivered that many times already, and a redriven crash loop
/// would be parked again before its handler ran).
pub const BROKER_OWNED: &[&str] = &["x-delivery-count"];

/// Headers as an AMQP table of long strings, without the headers the broker owns.
#[must_use]
pub fn to_field_table(headers: &Headers) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in headers {
        if BROKER_OWNED.contains(&k.as_str()) {
            continue;
        }
        t.insert(
            ShortString::from(k.as_str()),
            AMQPValue::LongString(LongString::from(v.as_bytes())),
        );
    }
    t
}

/// A scalar AMQP value as text; tables and arrays give `None`.
#[must_use]
pub fn value_text(v: &AMQPValue) -> Option<String> {
    Some(match v {
        AMQPValue::Boolean(b) => b.to_string(),
        AMQPValue::ShortShortInt(n) => n.to_string(),
        AMQPValue::ShortShortUInt(n) => n.to_string(),
        AMQPValue::ShortInt(n) => n.to_string(),
        AMQPValue::ShortUInt(n) => n.to_string(),
        AMQPValue::LongInt(n) => n.to_string(),
        AMQPValue::LongUInt(n) => n.to_string(),
        AMQPValue::LongLongInt(n) => n.to_string(),
        AMQPValue::Float(n) => n.to_string(),
        AMQPValue::Double(n) => n.to_string(),
        AMQPValue::ShortString(s) => s.as_str().to_string(),
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::Timestamp(t) => t.to_string(),
        AMQPValue::ByteArray(_)
        | AMQPValue::DecimalValue(_)
        | AMQPValue::FieldArray(_)
        | AMQPValue::FieldTable(_)
        | AMQPValue::Void => return None,
    })
}

/// The scalar headers of a table as strings (`x-death` and other nested values are left out).
#[must_use]
pub fn from_field_table(table: Option<&FieldTable>) -> Headers {
    let mut h = Headers::new();
    if let Some(t) = table {
        for (k, v) in t {
            if let Some(text) = value_text(v) {
                h.insert(k.as_str().to_string(), text);
            }
        }
    }
    h
}

/// One entry of the broker's `x-death` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XDeath {
    /// Queue the message was dead-lettered from.
    pub queue: String,
    /// `rejected`, `expired`, `maxlen` or `delivery_limit`.
    pub reason: String,
    /// How many times for this (queue, reason).
    pub count: u64,
    /// When it first happened.
    pub time: Option<DateTime<Utc>>,
}

fn as_u64(v: &AMQPValue) -> Option<u64> {
    value_text(v)?.parse().ok()
}

/// The `x-death` entries of a header table.
#[must_use]
pub fn x_deaths(table: Option<&FieldTable>) -> Vec<XDeath> {
    let Some(AMQPValue::FieldArray(arr)) = table.and_then(|t| t.inner().get("x-death")) else {
        return Vec::new();
    };
    arr.as_slice()
        .iter()
        .filter_map(|v| match v {
            AMQPValue::FieldTable(t) => {
                let get = |k: &str| t.inner().get(k);
                Some(XDeath {
                    queue: get("queue").and_then(value_text).unwrap_or_default(),
                    reason: get("reason").and_then(value_text).unwrap_or_default(),
                    count: get("count").and_then(as_u64).unwrap_or(1),
                    time: match get("time") {
                        Some(AMQPValue::Timestamp(ts)) => i64::try_from(*ts)
                            .ok()
                            .and_then(|s| Utc.timestamp_opt(s, 0).single()),
                        _ => None,
                    },
                })
            }
            _ => None,
        })
        .collect()
}

/// How many times a message left `queue` by being rejected or by exceeding the delivery
/// limit: the number of reject+DLX loops it made.
#[must_use]
pub fn loops_from(deaths: &[XDeath], queue: &str) -> u64 {
    deaths
        .iter()
        .filter(|d| d.queue == queue && (d.reason == "rejected" || d.reason == "delivery_limit"))
        .map(|d| d.count)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::FieldArray;

    #[test]
    fn round_trip_and_x_death() {
        let mut h = Headers::new();
        h.insert("x-retry-attempt".into(), "2".into());
        let mut t = to_field_table(&h);
        let mut death = FieldTable::default();
        death.insert("queue".into(), AMQPValue::LongString("w".into()));
        death.insert("reason".into(), AMQPValue::LongString("rejected".into()));
        death.insert("count".into(), AMQPValue::LongLongInt(3));
        death.insert("time".into(), AMQPValue::Timestamp(1_700_000_000));
        t.insert(
            "x-death".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
        );
        t.insert("x-delivery-count".into(), AMQPValue::LongInt(1));
        let back = from_field_table(Some(&t));
        assert_eq!(back.get("x-retry-attempt").map(String::as_str), Some("2"));
        assert_eq!(back.get("x-delivery-count").map(String::as_str), Some("1"));
        assert!(!back.contains_key("x-death"));
        let d = x_deaths(Some(&t));
        assert_eq!(d.len(), 1);
        assert_eq!(loops_from(&d, "w"), 3);
        assert_eq!(loops_from(&d, "other"), 0);
        assert!(d[0].time.is_some());
    }
}
