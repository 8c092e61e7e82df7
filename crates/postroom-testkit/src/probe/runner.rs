//! The probe's consumer settings and retry policy; [`crate::running`] runs the loop.

use postroom_core::consumer::{ConsumerConfig, Ordering};
use postroom_core::{EnvelopeDecoder, RetryPolicy};

/// Consumer settings for `name` (accepting `order.created` v1) with `retry`, `concurrency`
/// and `ordering`, and no circuit breaker.
pub fn config(
    name: &str,
    retry: RetryPolicy,
    concurrency: usize,
    ordering: Ordering,
) -> ConsumerConfig {
    let mut cfg = ConsumerConfig::new(name, EnvelopeDecoder::new().accept("order.created", 1..=1));
    cfg.retry = retry;
    cfg.version = "test-1".into();
    cfg.concurrency = concurrency;
    cfg.ordering = ordering;
    cfg.breaker.failure_threshold = 0;
    cfg
}

/// Consumer settings for `name` (accepting `order.created` v1) that outlast a server killed
/// and started again: retries on `ladder`, up to 100 of them, and no circuit breaker.
pub fn outlasting_a_crash(name: &str, ladder: &str) -> ConsumerConfig {
    let mut cfg = ConsumerConfig::new(name, EnvelopeDecoder::new().accept("order.created", 1..=1));
    cfg.retry = RetryPolicy::with_ladder(ladder.parse().unwrap());
    cfg.retry.max_retries = 100;
    cfg.breaker.failure_threshold = 0;
    cfg
}

/// A policy on `ladder` with `retries` retries, no deadline and no jitter.
pub fn policy(ladder: &str, retries: u32) -> RetryPolicy {
    RetryPolicy {
        ladder: ladder.parse().unwrap(),
        max_retries: retries,
        max_unknown_retries: 1,
        max_age: None,
        jitter: 0.0,
    }
}

/// What `policy` decides for a message's first transient failure (`db_down`) at `now`: the
/// retry plan a test settles a delivery with by hand.
///
/// # Panics
/// When the policy parks instead (its budget allows no retry).
#[must_use]
pub fn first_transient_retry(
    policy: &RetryPolicy,
    now: chrono::DateTime<chrono::Utc>,
) -> postroom_core::RetryPlan {
    let attempt = postroom_core::retry::Attempt {
        attempt: 0,
        occurred_at: None,
        now,
        class: postroom_core::ErrorClass::Transient,
        code: "db_down",
        message: "connection refused",
    };
    match policy.decide(&attempt, 0.0) {
        postroom_core::Disposition::Retry(plan) => plan,
        other => panic!("a first transient failure is retried, not {other:?}"),
    }
}
