//! Bounds on the numbers operators type (`--rate 1e-30`, `--kill-every 1e300`, a share of
//! `1.5`): each is a clear error before anything runs, never a panic deep in a timer.
//! The `parse_*` functions fit clap's `value_parser`.

use crate::error::{OpsError, OpsResult};
use std::time::Duration;

/// The slowest redrive rate, messages per second (one per 1000 s).
pub const MIN_RATE: f64 = 0.001;
/// The fastest redrive rate, messages per second.
pub const MAX_RATE: f64 = 100_000.0;
/// The longest interval in seconds a flag accepts (one day).
pub const MAX_SECONDS: f64 = 86_400.0;
/// The most rows one listing or redrive selects.
pub const MAX_LIMIT: usize = 1_000_000;

fn number(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .map_err(|_| format!("{s:?} is not a number"))
}

/// A rate in messages per second, within [`MIN_RATE`]..=[`MAX_RATE`].
pub fn check_rate(rate: f64) -> OpsResult<f64> {
    if rate.is_finite() && (MIN_RATE..=MAX_RATE).contains(&rate) {
        Ok(rate)
    } else {
        Err(OpsError::usage(format!(
            "the rate must be between {MIN_RATE} and {MAX_RATE} messages per second, not {rate}"
        )))
    }
}

/// [`check_rate`] for clap.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    check_rate(number(s)?).map_err(|e| e.message)
}

/// [`parse_rate`], or 0 for "unpaced" (as fast as it can).
pub fn parse_rate_or_unpaced(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if v == 0.0 {
        return Ok(0.0);
    }
    check_rate(v).map_err(|e| format!("{} (or 0: unpaced)", e.message))
}

/// A share between 0 and 1.
pub fn parse_share(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be between 0 and 1, not {v}"))
    }
}

/// A number of seconds from 0 to [`MAX_SECONDS`] (fractions allowed).
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "must be between 0 and {MAX_SECONDS} seconds, not {v}"
        ))
    }
}

/// A positive number of seconds up to [`MAX_SECONDS`].
pub fn parse_positive_seconds(s: &str) -> Result<f64, String> {
    let v = parse_seconds(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err("must be above 0 seconds".into())
    }
}

/// A span as operators type it ([`crate::time::parse_span`]) for `flag`, from `min` to `max`
/// (`--sample-every 1ms` is refused: it would keep a core busy).
pub fn parse_span_within(flag: &str, s: &str, min: Duration, max: Duration) -> OpsResult<Duration> {
    let d = crate::time::parse_span(s).map_err(|e| e.context(flag.to_string()))?;
    if (min..=max).contains(&d) {
        Ok(d)
    } else {
        let f = postroom_core::retry::ladder::format_duration;
        Err(OpsError::usage(format!(
            "{flag} must be between {} and {}, not {}",
            f(min),
            f(max),
            s.trim()
        )))
    }
}

/// A whole number from `min` to `max`.
pub fn parse_count(s: &str, min: usize, max: usize) -> Result<usize, String> {
    let v: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number from {min} to {max}"))?;
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be between {min} and {max}, not {v}"))
    }
}

/// A row limit from 1 to [`MAX_LIMIT`].
pub fn parse_limit(s: &str) -> Result<usize, String> {
    parse_count(s, 1, MAX_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pace_is_unpaced_or_a_bounded_rate() {
        assert_eq!(parse_rate_or_unpaced("0"), Ok(0.0));
        assert_eq!(parse_rate_or_unpaced("25"), Ok(25.0));
        for absurd in ["1e-300", "-1", "1e300", "NaN", "inf", "fast"] {
            assert!(parse_rate_or_unpaced(absurd).is_err(), "{absurd}");
        }
    }

    #[test]
    fn absurd_numbers_are_refused() {
        for bad in ["1e-30", "0", "-1", "NaN", "inf", "1e300", "x", ""] {
            assert!(parse_rate(bad).is_err(), "rate {bad}");
        }
        assert_eq!(parse_rate("20").unwrap(), 20.0);
        for bad in ["1e300", "-0.5", "NaN", "inf"] {
            assert!(parse_seconds(bad).is_err(), "seconds {bad}");
        }
        assert_eq!(parse_seconds("0").unwrap(), 0.0);
        assert!(parse_positive_seconds("0").is_err());
        for bad in ["1.5", "-0.1", "NaN"] {
            assert!(parse_share(bad).is_err(), "share {bad}");
        }
        for bad in ["0", "-1", "18446744073709551616", "2000000"] {
            assert!(parse_limit(bad).is_err(), "limit {bad}");
        }
        assert!(check_rate(1e-30).unwrap_err().message.contains("between"));
        let (s, h) = (Duration::from_secs(1), Duration::from_secs(3600));
        assert_eq!(
            parse_span_within("--sample-every", "1ms", s, h)
                .unwrap_err()
                .message,
            "--sample-every must be between 1s and 1h, not 1ms"
        );
        assert!(parse_span_within("--sample-every", "2h", s, h).is_err());
        assert!(parse_span_within("--sample-every", "9000000000000h", s, h).is_err());
        assert_eq!(
            parse_span_within("--x", "10s", s, h).unwrap(),
            Duration::from_secs(10)
        );
    }
}
