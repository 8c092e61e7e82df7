//! Times and durations as operators type them: `--since 2h`, `--until 2026-01-31T12:00:00Z`,
//! `--idle 2s`, `--ladder 1s,2s,4s`. Every value is checked: an absurd one
//! (`9000000000000s`, a time before year −262,000) is a clear error, never an overflow.

use crate::error::{OpsError, OpsResult};
use chrono::{DateTime, Utc};
use postroom_core::RetryLadder;
use std::time::Duration;

/// The longest retry stage the operator tools accept.
pub const MAX_STAGE: Duration = Duration::from_secs(24 * 3600);

/// Parse `250ms`, `5s`, `5m`, `2h`, `7d` (a bare number is seconds).
pub fn parse_span(s: &str) -> OpsResult<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad = || {
        OpsError::usage(format!(
            "bad duration {s:?}: use a whole number and ms, s, m, h or d (250ms, 30s, 5m, 2h, 7d)"
        ))
    };
    if num.is_empty() {
        return Err(bad());
    }
    let n: u64 = num
        .parse()
        .map_err(|_| OpsError::usage(format!("duration {s:?} is too large")))?;
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
        .ok_or_else(|| OpsError::usage(format!("duration {s:?} is too large")))
}

/// A point in time: RFC 3339 (`2026-01-31T12:00:00Z`) or an age before `now` (`30m`, `2h`,
/// `7d`).
pub fn parse_time(s: &str, now: DateTime<Utc>) -> OpsResult<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s.trim()) {
        return Ok(t.with_timezone(&Utc));
    }
    let age = parse_span(s).map_err(|e| {
        OpsError::usage(format!(
            "bad time {s:?}: use RFC 3339 (2026-01-31T12:00:00Z) or an age (30m, 2h, 7d) — {e}"
        ))
    })?;
    chrono::Duration::from_std(age)
        .ok()
        .and_then(|d| now.checked_sub_signed(d))
        .ok_or_else(|| {
            OpsError::usage(format!(
                "the age {s:?} reaches before the earliest time that can be represented"
            ))
        })
}

/// A retry ladder (`1s,2s,4s`): at least one stage, each above zero and at most [`MAX_STAGE`].
pub fn parse_ladder(s: &str) -> OpsResult<RetryLadder> {
    let mut delays = Vec::new();
    for part in s.split(',') {
        let d = parse_span(part).map_err(|e| e.context(format!("ladder {s:?}")))?;
        if d.is_zero() || d > MAX_STAGE {
            return Err(OpsError::usage(format!(
                "ladder {s:?}: each stage must be above zero and at most 24h, not {}",
                part.trim()
            )));
        }
        delays.push(d);
    }
    RetryLadder::new(delays).ok_or_else(|| OpsError::usage(format!("bad ladder {s:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn ages_and_times() {
        assert_eq!(
            parse_time("2h", now()).unwrap(),
            now() - chrono::Duration::hours(2)
        );
        assert_eq!(
            parse_time("7d", now()).unwrap(),
            now() - chrono::Duration::days(7)
        );
        assert_eq!(
            parse_time("2026-01-31T12:00:00Z", now())
                .unwrap()
                .to_rfc3339(),
            "2026-01-31T12:00:00+00:00"
        );
        assert_eq!(parse_span("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_span("90").unwrap(), Duration::from_secs(90));
    }

    #[test]
    fn absurd_values_are_clear_errors() {
        for s in [
            "9000000000000s",
            "9000000000000d",
            "99999999999999999999999s",
            "18446744073709551615d",
        ] {
            let e = parse_time(s, now()).unwrap_err();
            assert!(
                e.message.contains("too large") || e.message.contains("earliest"),
                "{s}: {e}"
            );
        }
        for s in ["", "h", "2 weeks", "-5m", "1.5h", "5x"] {
            assert!(parse_time(s, now()).is_err(), "{s}");
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
                .message
                .contains("ms, s, m, h or d")
        );
    }
}
