//! A circuit breaker that stops pulling messages while a dependency is down.
//!
//! Closed: pull freely, counting consecutive dependency failures; at the threshold it opens.
//! Open: pull nothing until the cooldown ends, then half-open. Half-open: pull one trial
//! message. A trial is in flight only while one is: an empty pull (the failed messages are
//! waiting in a retry stage, the work queue is empty — the ordinary case after an outage)
//! goes back to open for another cooldown; a trial that succeeds closes the breaker; one that
//! fails on the dependency opens it again; an outcome that says nothing about the dependency
//! (a permanent error, an undecodable body, a version gap, a handler panic) ends the trial
//! without a verdict, so the next pull is a new trial. No sequence of events leaves it
//! waiting forever.
//!
//! Every pulled message owes the breaker one [`Verdict`]: success, failure, or — when it
//! is dropped without one, as it is by a message parked before handling, skipped as already
//! applied, deferred behind a gap or lost to an early return — neutral. So no loop can end
//! a trial without telling the breaker.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Breaker settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive dependency failures that open the breaker. 0 disables it.
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
    /// Consuming; the count of consecutive dependency failures.
    Closed(u32),
    /// Paused until the instant.
    Open(Instant),
    /// Letting one trial through; `true` while the trial is in flight.
    HalfOpen(bool),
}

/// What the consumer loop may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Pull a message; report the result with [`CircuitBreaker::pulled`].
    Pull,
    /// Wait this long, then ask again.
    Wait(Duration),
}

/// How long the loop waits between looks while a trial is in flight.
const TRIAL_POLL: Duration = Duration::from_millis(50);

/// Consecutive-failure circuit breaker.
#[derive(Debug)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    state: Mutex<BreakerState>,
}

impl CircuitBreaker {
    /// A closed breaker.
    #[must_use]
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: Mutex::new(BreakerState::Closed(0)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BreakerState> {
        // The state is a plain value: a panic elsewhere cannot leave it half-written.
        crate::sync::lock_unpoisoned(&self.state)
    }

    /// The state now.
    #[must_use]
    pub fn state(&self) -> BreakerState {
        *self.lock()
    }

    /// Whether the loop may pull now.
    #[must_use]
    pub fn admit(&self) -> Admission {
        self.admit_at(Instant::now())
    }

    /// [`admit`](Self::admit) at a given instant (for tests).
    #[must_use]
    pub fn admit_at(&self, now: Instant) -> Admission {
        let mut s = self.lock();
        match *s {
            BreakerState::Closed(_) | BreakerState::HalfOpen(false) => Admission::Pull,
            BreakerState::HalfOpen(true) => Admission::Wait(TRIAL_POLL),
            BreakerState::Open(until) if now >= until => {
                *s = BreakerState::HalfOpen(false);
                Admission::Pull
            }
            BreakerState::Open(until) => Admission::Wait(until - now),
        }
    }

    /// The result of a pull the loop was admitted to: whether a message came.
    pub fn pulled(&self, got_message: bool) {
        self.pulled_at(got_message, Instant::now());
    }

    /// [`pulled`](Self::pulled) at a given instant (for tests).
    pub fn pulled_at(&self, got_message: bool, now: Instant) {
        let mut s = self.lock();
        if *s == BreakerState::HalfOpen(false) {
            *s = if got_message {
                BreakerState::HalfOpen(true)
            } else {
                BreakerState::Open(now + self.config.cooldown)
            };
        }
    }

    /// A message succeeded: the dependency works.
    pub fn record_success(&self) {
        *self.lock() = BreakerState::Closed(0);
    }

    /// A message ended in a way that says nothing about the dependency (permanent error,
    /// undecodable body, version gap, panic): a trial ends without a verdict.
    pub fn record_neutral(&self) {
        let mut s = self.lock();
        if *s == BreakerState::HalfOpen(true) {
            *s = BreakerState::HalfOpen(false);
        }
    }

    /// A dependency failure. Returns true if this opened the breaker.
    pub fn record_failure(&self) -> bool {
        self.record_failure_at(Instant::now())
    }

    /// [`record_failure`](Self::record_failure) at a given instant (for tests).
    pub fn record_failure_at(&self, now: Instant) -> bool {
        if self.config.failure_threshold == 0 {
            return false;
        }
        let mut s = self.lock();
        let open = match *s {
            BreakerState::Closed(n) => {
                let n = n.saturating_add(1);
                if n >= self.config.failure_threshold {
                    true
                } else {
                    *s = BreakerState::Closed(n);
                    false
                }
            }
            BreakerState::HalfOpen(_) => true,
            BreakerState::Open(_) => false,
        };
        if open {
            *s = BreakerState::Open(now + self.config.cooldown);
        }
        open
    }

    /// Whether it is open (or half-open) now, for the gauge.
    #[must_use]
    pub fn is_open(&self) -> bool {
        !matches!(*self.lock(), BreakerState::Closed(_))
    }
}

/// The outcome one pulled message owes its breaker: given once, by
/// [`success`](Verdict::success) or [`failure`](Verdict::failure); dropped without one, it
/// records a neutral outcome (the message said nothing about the dependency), so a trial
/// always ends.
#[must_use = "a verdict dropped at once records a neutral outcome"]
#[derive(Debug)]
pub struct Verdict {
    breaker: Arc<CircuitBreaker>,
    given: bool,
}

impl Verdict {
    /// The verdict owed to `breaker` for a message just pulled.
    pub fn owed_to(breaker: Arc<CircuitBreaker>) -> Self {
        Self {
            breaker,
            given: false,
        }
    }

    /// The message succeeded: the dependency works.
    pub fn success(mut self) {
        self.given = true;
        self.breaker.record_success();
    }

    /// The dependency failed. Returns true if this opened the breaker.
    pub fn failure(mut self) -> bool {
        self.given = true;
        self.breaker.record_failure()
    }

    /// The message ended in a way that says nothing about the dependency (what dropping
    /// the verdict does; this names it where a reader should see it).
    pub fn neutral(self) {}
}

impl Drop for Verdict {
    fn drop(&mut self) {
        if !self.given {
            self.breaker.record_neutral();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(BreakerConfig {
            failure_threshold: 2,
            cooldown: Duration::from_secs(5),
        })
    }

    #[test]
    fn opens_after_threshold_and_half_opens_after_cooldown() {
        let b = breaker();
        let t0 = Instant::now();
        assert!(!b.record_failure_at(t0));
        assert!(b.record_failure_at(t0));
        assert!(matches!(b.admit_at(t0), Admission::Wait(_)));
        let t1 = t0 + Duration::from_secs(6);
        assert_eq!(b.admit_at(t1), Admission::Pull);
        b.pulled_at(true, t1);
        assert_eq!(b.state(), BreakerState::HalfOpen(true));
        assert!(b.record_failure_at(t1), "a failed trial opens again");
        let t2 = t1 + Duration::from_secs(6);
        assert_eq!(b.admit_at(t2), Admission::Pull);
        b.pulled_at(true, t2);
        b.record_success();
        assert_eq!(b.state(), BreakerState::Closed(0));
    }

    /// A breaker opened by two failures, and the moment after its cooldown when it admits the
    /// trial pull.
    fn tripped_then_cooled() -> (CircuitBreaker, Instant) {
        let b = breaker();
        let t0 = Instant::now();
        b.record_failure_at(t0);
        b.record_failure_at(t0);
        let t1 = t0 + Duration::from_secs(6);
        assert_eq!(b.admit_at(t1), Admission::Pull);
        (b, t1)
    }

    /// The defect this state machine fixes: after the cooldown the trial pull found the work
    /// queue empty (the failed messages wait in a retry stage), and the breaker stayed
    /// half-open with a trial "in flight" forever, so the consumer never pulled again.
    #[test]
    fn an_empty_trial_pull_reopens_and_pulls_again_after_the_cooldown() {
        let (b, t1) = tripped_then_cooled();
        b.pulled_at(false, t1);
        assert!(matches!(b.admit_at(t1), Admission::Wait(d) if d > Duration::from_secs(4)));
        let t2 = t1 + Duration::from_secs(6);
        assert_eq!(b.admit_at(t2), Admission::Pull, "pulls again");
    }

    #[test]
    fn a_neutral_trial_ends_without_a_verdict() {
        let (b, t1) = tripped_then_cooled();
        b.pulled_at(true, t1);
        assert!(matches!(b.admit_at(t1), Admission::Wait(_)));
        b.record_neutral();
        assert_eq!(
            b.admit_at(t1),
            Admission::Pull,
            "the next pull is a new trial"
        );
    }

    #[derive(Clone, Debug)]
    enum Event {
        Advance(u64),
        Pull(bool),
        Success,
        Failure,
        Neutral,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u64..8_000).prop_map(Event::Advance),
            any::<bool>().prop_map(Event::Pull),
            Just(Event::Success),
            Just(Event::Failure),
            Just(Event::Neutral),
        ]
    }

    proptest! {
        /// Whatever happened, once every trial the loop pulled has its outcome recorded (as
        /// the consumer guarantees) and the cooldown has passed, the loop may pull again.
        #[test]
        fn never_stuck(events in proptest::collection::vec(event(), 0..60), threshold in 1u32..4) {
            let b = CircuitBreaker::new(BreakerConfig { failure_threshold: threshold, cooldown: Duration::from_secs(5) });
            let mut now = Instant::now();
            let mut trial_outstanding = false;
            for e in events {
                match e {
                    Event::Advance(ms) => now += Duration::from_millis(ms),
                    Event::Pull(got) => {
                        if b.admit_at(now) == Admission::Pull {
                            b.pulled_at(got, now);
                            trial_outstanding |= got && b.state() == BreakerState::HalfOpen(true);
                        }
                    }
                    Event::Success => { b.record_success(); trial_outstanding = false; }
                    Event::Failure => { b.record_failure_at(now); trial_outstanding = false; }
                    Event::Neutral => { b.record_neutral(); trial_outstanding = false; }
                }
            }
            if trial_outstanding {
                b.record_neutral();
            }
            let later = now + Duration::from_secs(6);
            prop_assert_eq!(b.admit_at(later), Admission::Pull);
        }
    }
}
