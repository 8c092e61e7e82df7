//! Durations and ladders as people type them in flags and topology files: `250ms`, `5s`,
//! `5m`, `2h`, `7d`, `1s,2s,4s`. Every value is checked: an absurd one (`9000000000000s`) is a
//! clear error, never an overflow.

use crate::error::{Error, Result};
use crate::retry::RetryLadder;
use std::time::Duration;

/// The longest retry stage a topology file or flag accepts.
pub const MAX_STAGE: Duration = Duration::from_secs(24 * 3600);

/// Parse `250ms`, `5s`, `5m`, `2h`, `7d` (a bare number is seconds).
pub fn parse_span(s: &str) -> Result<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad = || {
        Error::config(format!(
            "bad duration {s:?}: use a whole number and ms, s, m, h or d (250ms, 30s, 5m, 2h, 7d)"
        ))
    };
    if num.is_empty() {
        return Err(bad());
    }
    let too_large = || Error::config(format!("duration {s:?} is too large"));
    let n: u64 = num.parse().map_err(|_| too_large())?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" | "" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(ms_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(too_large)
}

/// A retry ladder (`1s,2s,4s`): at least one stage, each above zero and at most [`MAX_STAGE`].
pub fn parse_ladder(s: &str) -> Result<RetryLadder> {
    let mut delays = Vec::new();
    for part in s.split(',') {
        let d = parse_span(part).map_err(|e| e.context(format_args!("ladder {s:?}")))?;
        if d.is_zero() || d > MAX_STAGE {
            return Err(Error::config(format!(
                "ladder {s:?}: each stage must be above zero and at most 24h, not {}",
                part.trim()
            )));
        }
        delays.push(d);
    }
    RetryLadder::new(delays).ok_or_else(|| Error::config(format!("bad ladder {s:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(parse_span("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_span("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_span("7d").unwrap(), Duration::from_secs(7 * 86_400));
        for s in ["9000000000000000d", "99999999999999999999999s"] {
            assert!(
                parse_span(s).unwrap_err().message().contains("too large"),
                "{s}"
            );
        }
        for s in ["", "h", "2 weeks", "-5m", "1.5h", "5x"] {
            assert!(parse_span(s).is_err(), "{s}");
        }
    }

    #[test]
    fn ladders() {
        assert_eq!(parse_ladder("1s,2s,4s").unwrap().to_string(), "1s,2s,4s");
        assert_eq!(
            parse_ladder("250ms, 1s").unwrap().delays(),
            &[Duration::from_millis(250), Duration::from_secs(1)]
        );
        for bad in ["", "0s", "5x", "25h", "9000000000000h", "1s,,2s"] {
            assert!(parse_ladder(bad).is_err(), "{bad}");
        }
        assert!(
            parse_ladder("5x")
                .unwrap_err()
                .message()
                .contains("ms, s, m, h or d")
        );
    }
}
