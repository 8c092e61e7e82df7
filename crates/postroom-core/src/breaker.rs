//! A circuit breaker that pauses consumption while a dependency is down (R14).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Breaker settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive transient failures that open the breaker. 0 disables it.
    pub failure_threshold: u32,
    /// How long it stays open before letting one message through.
    pub cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cooldown: Duration::from_secs(5),
        }
    }
}

/// Breaker state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Consuming.
    Closed,
    /// Paused until the instant.
    Open(Instant),
    /// One trial message in flight.
    HalfOpen,
}

/// Consecutive-failure circuit breaker.
#[derive(Debug)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    inner: Mutex<(BreakerState, u32)>,
}

impl CircuitBreaker {
    /// A closed breaker.
    #[must_use]
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            inner: Mutex::new((BreakerState::Closed, 0)),
        }
    }

    /// The state now.
    #[must_use]
    pub fn state(&self) -> BreakerState {
        self.inner.lock().expect("breaker lock").0
    }

    /// How long to wait before pulling the next message: `None` to pull now.
    #[must_use]
    pub fn pause(&self) -> Option<Duration> {
        let mut g = self.inner.lock().expect("breaker lock");
        match g.0 {
            BreakerState::Closed => None,
            BreakerState::HalfOpen => Some(Duration::from_millis(50)),
            BreakerState::Open(until) => {
                let now = Instant::now();
                if now >= until {
                    g.0 = BreakerState::HalfOpen;
                    None
                } else {
                    Some(until - now)
                }
            }
        }
    }

    /// A message succeeded (or failed for a reason unrelated to dependencies).
    pub fn record_success(&self) {
        *self.inner.lock().expect("breaker lock") = (BreakerState::Closed, 0);
    }

    /// A dependency failure. Returns true if this opened the breaker.
    pub fn record_failure(&self) -> bool {
        if self.config.failure_threshold == 0 {
            return false;
        }
        let mut g = self.inner.lock().expect("breaker lock");
        g.1 += 1;
        let open = g.0 == BreakerState::HalfOpen || g.1 >= self.config.failure_threshold;
        if open && !matches!(g.0, BreakerState::Open(_)) {
            g.0 = BreakerState::Open(Instant::now() + self.config.cooldown);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_and_half_opens_after_cooldown() {
        let b = CircuitBreaker::new(BreakerConfig {
            failure_threshold: 2,
            cooldown: Duration::from_millis(30),
        });
        assert!(!b.record_failure());
        assert!(b.record_failure());
        assert!(b.pause().is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.pause().is_none());
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.record_failure(), "a failed trial opens again");
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.pause().is_none());
        b.record_success();
        assert_eq!(b.state(), BreakerState::Closed);
    }
}
