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

/// `5s`, `30s`, `5m`, `1h`, `250ms`.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) {
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
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" | "" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("bad duration unit in {s:?}: use ms, s, m or h")),
    };
    Ok(d)
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
