//! Bounded exponential backoff with full jitter, for reconnects and failing loops.

use std::time::Duration;

/// Exponential backoff between `base` and `max`, with jitter in `[d/2, d]`.
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    step: u32,
}

impl Backoff {
    /// A backoff starting at `base`, never above `max`.
    #[must_use]
    pub fn new(base: Duration, max: Duration) -> Self {
        Self { base, max, step: 0 }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << self.step.min(16))
            .min(self.max);
        self.step = self.step.saturating_add(1);
        exp.mul_f64(0.5 + rand::random::<f64>() * 0.5)
    }

    /// Back to `base` after a success.
    pub fn reset(&mut self) {
        self.step = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_stays_bounded() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let ds: Vec<_> = (0..10).map(|_| b.next_delay()).collect();
        assert!(ds[0] >= Duration::from_millis(50) && ds[0] <= Duration::from_millis(100));
        assert!(ds.iter().all(|d| *d <= Duration::from_secs(2)));
        assert!(ds[9] >= Duration::from_secs(1));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
