//! Timestamps are stored as Unix milliseconds.

use chrono::{DateTime, TimeZone, Utc};
use std::time::Duration;

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Milliseconds in a duration, saturating.
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A stored timestamp back to a `DateTime`.
pub fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}
