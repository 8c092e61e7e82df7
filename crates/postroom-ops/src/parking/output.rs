//! Parked messages and redrive runs as JSON (one shape for the CLI's `--json` and the
//! console), with payloads hidden unless asked for and capped when shown.

use postroom_core::{ParkedMessage, RedriveRun};
use serde_json::Value;

/// How many bytes of a payload are shown by default.
pub const DEFAULT_PAYLOAD_LIMIT: usize = 4096;

/// Whether and how much of a payload to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadView {
    /// Show it at all (payloads may hold personal data).
    pub show: bool,
    /// At most this many bytes.
    pub limit: usize,
}

impl PayloadView {
    /// Hidden.
    #[must_use]
    pub fn hidden() -> Self {
        Self {
            show: false,
            limit: DEFAULT_PAYLOAD_LIMIT,
        }
    }
}

/// A payload as text: a placeholder when hidden; else its first `limit` bytes as UTF-8,
/// with a note of how much was cut.
#[must_use]
pub fn payload_text(body: &[u8], view: PayloadView) -> String {
    if !view.show {
        return format!("<redacted: {} bytes; --show-payload to see>", body.len());
    }
    let shown = &body[..body.len().min(view.limit)];
    let text = match std::str::from_utf8(shown) {
        Ok(s) => s,
        // A cut in the middle of a character is not a reason to hide the rest.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&shown[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return format!("<{} bytes, not UTF-8>", body.len()),
    };
    let cut = body.len() - text.len();
    if cut == 0 {
        text.to_string()
    } else {
        format!("{text}… <{cut} more bytes; --payload-limit to see more>")
    }
}

/// `text` with control characters written as escapes, so that a payload cannot move the
/// cursor or recolour the operator's terminal.
#[must_use]
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A parked message as JSON, its body shown per `view`.
#[must_use]
pub fn parked_json(m: &ParkedMessage, view: PayloadView) -> Value {
    let mut v = serde_json::to_value(m).unwrap_or(Value::Null);
    v["body"] = Value::String(payload_text(&m.body, view));
    v
}

/// A redrive run as JSON.
#[must_use]
pub fn run_json(r: &RedriveRun) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(limit: usize) -> PayloadView {
        PayloadView { show: true, limit }
    }

    #[test]
    fn payloads_are_hidden_or_capped() {
        assert_eq!(
            payload_text(b"secret", PayloadView::hidden()),
            "<redacted: 6 bytes; --show-payload to see>"
        );
        assert_eq!(payload_text(b"{\"a\":1}", view(100)), "{\"a\":1}");
        let big = vec![b'x'; 10_000];
        let t = payload_text(&big, view(16));
        assert!(t.starts_with("xxxxxxxxxxxxxxxx…"), "{t}");
        assert!(t.contains("9984 more bytes"), "{t}");
        // A cut inside a character keeps what comes before it.
        let t = payload_text("aé".as_bytes(), view(2));
        assert!(t.starts_with("a…") && t.contains("2 more bytes"), "{t}");
        assert_eq!(
            payload_text(&[0xff, 0xfe, 0], view(100)),
            "<3 bytes, not UTF-8>"
        );
    }

    #[test]
    fn controls_are_escaped() {
        assert_eq!(escape_controls("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
    }
}
