//! The delay ladder: one delay per retry stage.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Delays of the retry stages, in order. Never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryLadder(Vec<Duration>);

impl Default for RetryLadder {
    /// 5 s → 30 s → 5 min, the seed's ladder.
    fn default() -> Self {
        Self(vec![
            Duration::from_secs(5),
            Duration::from_secs(30),
            Duration::from_secs(300),
        ])
    }
}

impl RetryLadder {
    /// A ladder from delays; `None` when empty or a delay is zero.
    #[must_use]
    pub fn new(delays: Vec<Duration>) -> Option<Self> {
        (!delays.is_empty() && delays.iter().all(|d| !d.is_zero())).then_some(Self(delays))
    }

    /// Number of stages.
    #[must_use]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The stages.
    #[must_use]
    pub fn delays(&self) -> &[Duration] {
        &self.0
    }

    /// The stage used for a message that has already been retried `attempt` times.
    #[must_use]
    pub fn stage_for(&self, attempt: u32) -> usize {
        (attempt as usize).min(self.0.len() - 1)
    }

    /// Delay of a stage.
    #[must_use]
    pub fn delay(&self, stage: usize) -> Duration {
        self.0[stage.min(self.0.len() - 1)]
    }

    /// Stage names as used in queue names: `5s`, `30s`, `5m`, `250ms`.
    #[must_use]
    pub fn stage_name(&self, stage: usize) -> String {
        format_duration(self.delay(stage))
    }
}

/// `5s`, `30s`, `5m`, `1h`, `250ms`; zero as `0s`.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".to_string()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Parse `250ms`, `5s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?}: expected e.g. 250ms, 5s, 5m, 1h"))?;
    let seconds_per = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" | "" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("bad duration unit in {s:?}: use ms, s, m or h")),
    };
    n.checked_mul(seconds_per)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("duration {s:?} is too long"))
}

impl fmt::Display for RetryLadder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|d| format_duration(*d)).collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for RetryLadder {
    type Err = String;
    /// `5s,30s,5m`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let delays = s
            .split(',')
            .map(parse_duration)
            .collect::<Result<Vec<_>, _>>()?;
        RetryLadder::new(delays)
            .ok_or_else(|| format!("bad ladder {s:?}: needs at least one non-zero delay"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_an_overflowing_one_is_an_error_not_a_panic() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        // A ladder in a topology file panicked here: `n * 60` overflowed u64.
        let err = parse_duration("307445734561825861m").unwrap_err();
        assert!(err.contains("too long"), "{err}");
        assert!(parse_duration("5124095576030432h").is_err());
        assert!("1s,307445734561825861m".parse::<RetryLadder>().is_err());
        assert_eq!(
            parse_duration("307445734561825860m"),
            Ok(Duration::from_secs(307_445_734_561_825_860 * 60))
        );
    }
}
