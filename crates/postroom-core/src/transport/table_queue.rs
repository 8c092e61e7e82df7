//! Settings of a queue kept in database tables (the embedded SQLite queue and the PostgreSQL
//! queue): subscribers poll for visible rows, lease a batch of them, and a row whose lease
//! expires is delivered again. Both queues take the same settings under the same names; each
//! states its own defaults (`SqliteQueue::defaults`, `PgQueue::defaults`), tuned to its
//! engine.

use super::{
    BoxSubscriber, Capabilities, DelayCapability, KeyOrdering, RedeliveryCounting, Subscriber,
    Subscription,
};
use crate::error::{Error, ErrorKind, Result};
use std::time::Duration;

/// Longest delay a queue in tables keeps (a year: far beyond any sane retry ladder).
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Settings of a queue in tables.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct QueueConfig {
    /// How long a leased row stays invisible to other subscribers before it is delivered
    /// again (the visibility timeout): longer than a handler can take.
    pub lease: Duration,
    /// Rows a subscriber leases at once (≥ 1; 0 is refused).
    pub prefetch: usize,
    /// How often an idle subscriber looks for new rows.
    pub poll_interval: Duration,
}

crate::setters!(QueueConfig {
    /// Set the lease.
    lease: Duration,
    /// Set the prefetch.
    prefetch: usize,
    /// Set the poll interval.
    poll_interval: Duration,
});

impl QueueConfig {
    /// Settings with every value given.
    pub const fn new(lease: Duration, prefetch: usize, poll_interval: Duration) -> Self {
        Self {
            lease,
            prefetch,
            poll_interval,
        }
    }

    /// What a queue in tables with these settings can do: any delay up to [`MAX_DELAY`] (the
    /// due time is a column), deliveries counted by the queue itself, the lease as the time a
    /// subscriber owns a row, no per-key ordering, messages up to `max_message_bytes` (the
    /// engine's limit on one value).
    pub fn capabilities(&self, max_message_bytes: usize) -> Capabilities {
        Capabilities {
            delay: DelayCapability::UpTo(MAX_DELAY),
            redelivery: RedeliveryCounting {
                counted: true,
                native_limit: None,
            },
            ownership: Some(self.lease),
            ordering: KeyOrdering::None,
            max_message_bytes,
        }
    }

    /// Refuse an unbounded or zero prefetch, a zero lease and a zero poll interval.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::new(ErrorKind::Config, m.to_string()));
        super::check_prefetch(self.prefetch)?;
        if self.lease.is_zero() {
            return bad("the lease must be longer than zero");
        }
        if self.poll_interval.is_zero() {
            return bad("the poll interval must be longer than zero");
        }
        Ok(())
    }
}

/// How a queue in tables answers [`Transport::subscribe`](super::Transport::subscribe): check
/// `subscription`, then `open` the subscriber of its consumer on its routes, reading a queue
/// with the settings `config` but the subscription's prefetch.
pub async fn subscribe<S: Subscriber>(
    config: &QueueConfig,
    subscription: &Subscription,
    open: impl AsyncFnOnce(QueueConfig, &str, &[&str]) -> Result<S>,
) -> Result<BoxSubscriber> {
    subscription.validate()?;
    let config = config.clone().prefetch(subscription.prefetch);
    let subscriber = open(config, &subscription.consumer, &subscription.route_refs()).await?;
    Ok(BoxSubscriber::new(subscriber))
}

/// How a queue in tables answers [`Transport::dead_letters`](super::Transport::dead_letters):
/// it has no dead-letter queue to drain, since parking writes straight into the parking
/// table, in the transaction that removes the queue row.
pub fn dead_letters() -> Result<Option<BoxSubscriber>> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_values_are_refused_naming_the_setting() {
        let ok = QueueConfig::new(Duration::from_secs(1), 1, Duration::from_millis(10));
        assert!(ok.validate().is_ok());
        for (bad, word) in [
            (ok.clone().prefetch(0), "prefetch"),
            (ok.clone().lease(Duration::ZERO), "lease"),
            (ok.clone().poll_interval(Duration::ZERO), "poll interval"),
        ] {
            let e = bad.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config);
            assert!(e.to_string().contains(word), "{e}");
        }
    }
}
