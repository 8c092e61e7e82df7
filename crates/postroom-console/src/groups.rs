//! Failure groups: parked copies that failed for the same cause. The fingerprint is the
//! consumer, message type, error class and code, and the error message with numbers, UUIDs
//! and hex ids masked, so that "order 17 not found" and "order 42 not found" fall together.

use chrono::{DateTime, Utc};
use postroom_core::{ErrorClass, MessageId, ParkedSummary};
use std::collections::HashMap;

/// The error message with UUIDs (`<uuid>`), hex ids of 8 or more digits or with `0x`
/// (`<hex>`) and numbers (`<n>`) masked.
#[must_use]
pub fn mask(message: &str) -> String {
    let c: Vec<char> = message.chars().collect();
    let n = c.len();
    let word = |i: usize| i < n && (c[i].is_alphanumeric() || c[i] == '_');
    let hex = |i: usize| i < n && c[i].is_ascii_hexdigit();
    let mut out = String::with_capacity(message.len());
    let mut i = 0;
    while i < n {
        let boundary = i == 0 || !word(i - 1);
        if boundary {
            // 8-4-4-4-12 hex digits.
            let groups = [8, 4, 4, 4, 12];
            let mut j = i;
            let mut ok = true;
            for (g, len) in groups.iter().enumerate() {
                if g > 0 {
                    if j < n && c[j] == '-' {
                        j += 1;
                    } else {
                        ok = false;
                        break;
                    }
                }
                if (j..j + len).all(hex) {
                    j += len;
                } else {
                    ok = false;
                    break;
                }
            }
            if ok && !word(j) {
                out.push_str("<uuid>");
                i = j;
                continue;
            }
            // 0x… or a run of at least 8 hex digits with a digit in it.
            let prefixed = i + 1 < n && c[i] == '0' && (c[i + 1] == 'x' || c[i + 1] == 'X');
            let start = if prefixed { i + 2 } else { i };
            let mut j = start;
            while hex(j) {
                j += 1;
            }
            let run = j - start;
            let has_digit = c[start..j].iter().any(char::is_ascii_digit);
            if !word(j) && ((prefixed && run >= 1) || (run >= 8 && has_digit)) {
                out.push_str("<hex>");
                i = j;
                continue;
            }
        }
        if c[i].is_ascii_digit() {
            while i < n
                && (c[i].is_ascii_digit()
                    || (c[i] == '.' && i + 1 < n && c[i + 1].is_ascii_digit()))
            {
                i += 1;
            }
            out.push_str("<n>");
            continue;
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

/// FNV-1a, 64 bits: the same key in every build and process.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The group key of a parked copy: 16 hex digits.
#[must_use]
pub fn fingerprint(s: &ParkedSummary) -> String {
    format!(
        "{:016x}",
        fnv1a(&[
            &s.consumer,
            s.message_type.as_deref().unwrap_or(""),
            s.error_class.as_str(),
            &s.error_code,
            &mask(&s.error_message),
        ])
    )
}

/// Parked copies that failed for the same cause.
#[derive(Clone, Debug, PartialEq)]
pub struct FailureGroup {
    /// Fingerprint.
    pub key: String,
    /// Consumer.
    pub consumer: String,
    /// Message type.
    pub message_type: Option<String>,
    /// Error class.
    pub error_class: ErrorClass,
    /// Error code.
    pub error_code: String,
    /// The error message, masked.
    pub template: String,
    /// How many copies.
    pub count: u64,
    /// When the first was parked.
    pub first_seen: DateTime<Utc>,
    /// When the last was parked.
    pub last_seen: DateTime<Utc>,
    /// The copies, newest first.
    pub members: Vec<(String, MessageId)>,
}

/// Group `summaries`, largest group first (then the most recent).
#[must_use]
pub fn group(summaries: &[ParkedSummary]) -> Vec<FailureGroup> {
    let mut by_key: HashMap<String, FailureGroup> = HashMap::new();
    for s in summaries {
        let key = fingerprint(s);
        let g = by_key.entry(key.clone()).or_insert_with(|| FailureGroup {
            key,
            consumer: s.consumer.clone(),
            message_type: s.message_type.clone(),
            error_class: s.error_class,
            error_code: s.error_code.clone(),
            template: mask(&s.error_message),
            count: 0,
            first_seen: s.parked_at,
            last_seen: s.parked_at,
            members: Vec::new(),
        });
        g.count += 1;
        g.first_seen = g.first_seen.min(s.parked_at);
        g.last_seen = g.last_seen.max(s.parked_at);
        g.members.push((s.consumer.clone(), s.message_id));
    }
    let mut groups: Vec<FailureGroup> = by_key.into_values().collect();
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(b.last_seen.cmp(&a.last_seen))
            .then(a.key.cmp(&b.key))
    });
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::ParkedStatus;

    #[test]
    fn masks_numbers_uuids_and_hex_ids() {
        assert_eq!(mask("order 42 not found"), "order <n> not found");
        assert_eq!(
            mask("id 0192b1c4-7a3e-7cc0-9d1e-2f3a4b5c6d7e failed after 3.5s"),
            "id <uuid> failed after <n>s"
        );
        assert_eq!(mask("txn deadbeef0042 at 0x1F"), "txn <hex> at <hex>");
        assert_eq!(mask("decoder failed"), "decoder failed");
        // A word of hex letters without a digit is a word, not an id.
        assert_eq!(mask("deadbeefcafe"), "deadbeefcafe");
        assert_eq!(mask("données 7 ✓"), "données <n> ✓");
    }

    fn summary(consumer: &str, code: &str, msg: &str, min: i64) -> ParkedSummary {
        ParkedSummary {
            message_id: MessageId::new(),
            consumer: consumer.into(),
            message_type: Some("order.created".into()),
            error_class: ErrorClass::Permanent,
            error_code: code.into(),
            error_message: msg.into(),
            parked_at: DateTime::from_timestamp(1_800_000_000 + min * 60, 0).unwrap(),
            status: ParkedStatus::Parked,
        }
    }

    #[test]
    fn groups_by_masked_cause() {
        let rows = vec![
            summary("inventory", "bad_payload", "order 1 has no sku", 0),
            summary("inventory", "bad_payload", "order 2 has no sku", 5),
            summary("inventory", "bad_payload", "order 3 has no sku", 2),
            summary("inventory", "bad_payload", "price missing", 1),
            summary("billing", "bad_payload", "order 4 has no sku", 1),
        ];
        let groups = group(&rows);
        assert_eq!(groups.len(), 3);
        assert_eq!(groups[0].count, 3);
        assert_eq!(groups[0].template, "order <n> has no sku");
        assert_eq!(groups[0].first_seen, rows[0].parked_at);
        assert_eq!(groups[0].last_seen, rows[1].parked_at);
        assert_eq!(fingerprint(&rows[0]), fingerprint(&rows[2]));
        assert_ne!(fingerprint(&rows[0]), fingerprint(&rows[4]));
    }
}
