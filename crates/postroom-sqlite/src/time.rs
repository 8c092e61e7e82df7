//! Timestamps are stored as Unix milliseconds.

use chrono::{DateTime, TimeZone, Utc};
use std::time::Duration;

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// The first stored millisecond at or after now + `delay`: a row made visible at it is never
/// seen before the delay has passed (truncating now and the delay to milliseconds could make a
/// retry up to 2 ms early).
pub fn due_ms(delay: Duration) -> i64 {
    let now_us = Utc::now().timestamp_micros();
    let delay_us = i64::try_from(delay.as_micros()).unwrap_or(i64::MAX);
    now_us.saturating_add(delay_us).saturating_add(999) / 1000
}

/// Milliseconds in a duration, saturating.
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A stored timestamp back to a `DateTime`.
pub fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_time_is_never_before_now_plus_the_delay() {
        for delay_us in [0u64, 1, 999, 1000, 1001, 609_766] {
            let delay = Duration::from_micros(delay_us);
            let before_us = Utc::now().timestamp_micros();
            let due = due_ms(delay);
            assert!(
                due * 1000 >= before_us + i64::try_from(delay_us).unwrap(),
                "{delay:?}: due {due} ms is before now + delay"
            );
        }
        assert_eq!(due_ms(Duration::MAX), i64::MAX / 1000);
    }
}
