//! Times and durations as operators type them: `--since 2h`, `--until 2026-01-31T12:00:00Z`,
//! `--idle 2s`, `--ladder 1s,2s,4s`. Every value is checked: an absurd one
//! (`9000000000000s`, a time before year −262,000) is a clear error, never an overflow.

use crate::error::{OpsError, OpsResult};
use chrono::{DateTime, Utc};

pub use postroom_core::driver::text::{MAX_STAGE, parse_ladder, parse_span};

/// A point in time: RFC 3339 (`2026-01-31T12:00:00Z`) or an age before `now` (`30m`, `2h`,
/// `7d`).
pub fn parse_time(s: &str, now: DateTime<Utc>) -> OpsResult<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s.trim()) {
        return Ok(t.with_timezone(&Utc));
    }
    let age = parse_span(s).map_err(|e| {
        OpsError::usage(format!(
            "bad time {s:?}: use RFC 3339 (2026-01-31T12:00:00Z) or an age (30m, 2h, 7d) — {}",
            e.message()
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
}
