//! The retry budget as a pure decision.
//!
//! Given the attempt a message is on, when it happened, the time now and the class of the
//! error, [`RetryPolicy::decide`] says: retry at ladder stage `k` after a jittered delay, or
//! park with a reason. The delay lives in the broker; nothing here sleeps.

pub mod headers;
pub mod ladder;

pub use headers::retry_headers;
pub use ladder::RetryLadder;

use crate::error::ErrorClass;
use crate::outcome::{Disposition, ParkReason, RetryPlan};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Limits on retrying one message.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// The delay ladder. The last stage repeats when attempts outnumber stages.
    pub ladder: RetryLadder,
    /// Maximum number of retries (not counting the first delivery).
    pub max_retries: u32,
    /// Retries allowed for errors of class [`ErrorClass::Unknown`].
    pub max_unknown_retries: u32,
    /// Business deadline counted from `occurred_at`: no retry is scheduled past it.
    pub max_age: Option<Duration>,
    /// Extra random delay, as a fraction of the stage delay, in `[0, jitter]`. Added, never
    /// subtracted: a retry is never earlier than its stage.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    /// 5 s → 30 s → 5 min, three retries, one day deadline, 10 % jitter.
    fn default() -> Self {
        Self {
            ladder: RetryLadder::default(),
            max_retries: 3,
            max_unknown_retries: 2,
            max_age: Some(Duration::from_secs(24 * 3600)),
            jitter: 0.1,
        }
    }
}

/// Inputs of one decision.
#[derive(Clone, Debug)]
pub struct Attempt<'a> {
    /// Retries already made (`x-retry-attempt` of the delivery; 0 on the first delivery).
    pub attempt: u32,
    /// When the business fact happened; `None` when the body could not be decoded.
    pub occurred_at: Option<DateTime<Utc>>,
    /// Now.
    pub now: DateTime<Utc>,
    /// Class of the error.
    pub class: ErrorClass,
    /// Error code.
    pub code: &'a str,
    /// Error text.
    pub message: &'a str,
}

crate::setters!(RetryPolicy {
    /// Set the ladder, keeping the number of retries (the last stage repeats when retries
    /// outnumber stages).
    ladder: RetryLadder,
    /// Set the number of retries after the first delivery.
    retries => max_retries: u32,
    /// Set the retries allowed for unclassified errors.
    unknown_retries => max_unknown_retries: u32,
    /// Set the business deadline counted from `occurred_at` (`None`: no deadline).
    max_age: Option<Duration>,
    /// Set the jitter fraction (added to each delay, never subtracted).
    jitter: f64,
});

impl RetryPolicy {
    /// A policy with this ladder and as many retries as stages (the default's other limits).
    /// To state the number of retries separately, use
    /// `RetryPolicy::default().ladder(l).retries(n)`.
    #[must_use]
    pub fn with_ladder(ladder: RetryLadder) -> Self {
        let max_retries = ladder.len() as u32;
        Self {
            ladder,
            max_retries,
            ..Self::default()
        }
    }

    /// Decide what to do after a failed attempt. `unit` is a random number in `[0, 1)`
    /// used for jitter (pass `rand::random()`; tests pass fixed values).
    #[must_use]
    pub fn decide(&self, a: &Attempt<'_>, unit: f64) -> Disposition {
        let park = |code: &str, message: String| {
            Disposition::Park(ParkReason {
                error_class: a.class,
                error_code: code.to_string(),
                error_message: message,
            })
        };
        let limit = match a.class {
            ErrorClass::Permanent => return park(a.code, a.message.to_string()),
            ErrorClass::Transient => self.max_retries,
            ErrorClass::Unknown => self.max_unknown_retries.min(self.max_retries),
        };
        if a.attempt >= limit {
            return park(
                a.code,
                format!(
                    "retry budget exhausted after {} retries ({} allowed): {}",
                    a.attempt, limit, a.message
                ),
            );
        }
        let stage = self.ladder.stage_for(a.attempt);
        let stage_delay = self.ladder.delay(stage);
        let unit = unit.clamp(0.0, 1.0);
        let extra = stage_delay.mul_f64(self.jitter.max(0.0) * unit);
        let delay = stage_delay + extra;
        if let (Some(max_age), Some(occurred)) = (self.max_age, a.occurred_at) {
            // Both sums saturate: a date near the end of the calendar has no deadline within
            // it, and an absurd delay is due at the end of time.
            let deadline = chrono::Duration::from_std(max_age)
                .ok()
                .and_then(|d| occurred.checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            let due = chrono::Duration::from_std(delay)
                .ok()
                .and_then(|d| a.now.checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            if due > deadline {
                return park(
                    a.code,
                    format!(
                        "deadline of {}s after occurred_at passed before the next retry: {}",
                        max_age.as_secs(),
                        a.message
                    ),
                );
            }
        }
        Disposition::Retry(RetryPlan {
            attempt: a.attempt.saturating_add(1),
            stage,
            stage_delay,
            delay,
            error_class: a.class,
            error_code: a.code.to_string(),
            error_message: a.message.to_string(),
        })
    }
}

#[cfg(test)]
mod tests;
