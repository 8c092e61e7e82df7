//! The consumer side every PostgreSQL scenario shares: a handler that claims the inbox row and
//! applies the business update in one transaction, and a progress counter to wait on.

use crate::resources::pg::EFFECT_SQL;
use crate::resources::rabbit::CONSUMER;
use postroom_core::{Envelope, Handled, Handler, HandlerError, Incoming, Subscriber, async_trait};
use postroom_postgres::{TablePrefix, commit, inbox, map_error};
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// Counts finished units of work and wakes whoever waits for a total.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicUsize,
    notify: Notify,
}

impl Progress {
    /// One more done.
    pub fn tick(&self) {
        self.add(1);
    }

    /// `n` more done.
    pub fn add(&self, n: usize) {
        self.done.fetch_add(n, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Done so far.
    #[must_use]
    pub fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }

    /// Wait until `total` are done; `false` when `timeout` passed first.
    pub async fn wait_for(&self, total: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            if self.done() >= total {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.done() >= total;
            }
        }
    }
}

/// Claims the inbox row and bumps the aggregate's counter in one transaction.
#[derive(Debug, Clone)]
pub struct InboxHandler {
    /// The pool.
    pub pool: PgPool,
    /// postroom's table prefix.
    pub prefix: TablePrefix,
    /// Counts handled messages.
    pub progress: Arc<Progress>,
}

impl InboxHandler {
    /// A handler on `pool` with the default prefix.
    #[must_use]
    pub fn new(pool: PgPool, progress: Arc<Progress>) -> Self {
        Self {
            pool,
            prefix: TablePrefix::default(),
            progress,
        }
    }
}

#[async_trait]
impl Handler for InboxHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let fresh = claim_and_apply(&self.pool, &self.prefix, &m.envelope).await?;
        self.progress.tick();
        Ok(if fresh {
            Handled::Applied
        } else {
            Handled::Duplicate
        })
    }
}

/// Claim `env`'s inbox row and, when it was new, bump its aggregate's counter, in one
/// transaction; whether it was new.
pub async fn claim_and_apply(
    pool: &PgPool,
    prefix: &TablePrefix,
    env: &Envelope,
) -> Result<bool, HandlerError> {
    let mut tx = pool.begin().await.map_err(map_error)?;
    let fresh = inbox::claim(&mut tx, prefix, CONSUMER, env.id).await?;
    if fresh {
        sqlx::query(EFFECT_SQL)
            .bind(&env.aggregate.id)
            .execute(&mut *tx)
            .await
            .map_err(map_error)?;
    }
    commit(tx).await?;
    Ok(fresh)
}

/// Run `handler` as postroom's consumer with `concurrency` on `sub` until `n` deliveries are
/// settled (or [`timeout`](super::timeout) passes); messages per second over that time. The
/// clock stops at the last settle, as the raw loops' clocks stop at their last ack: the
/// consumer's shutdown afterwards waits out the receive it is in (up to half a second on an
/// idle subscriber), and that is not work. `progress` counts what the handler did; `who`
/// names the consumer in the error.
pub async fn timed_consumer<H: Handler + 'static, S: Subscriber>(
    handler: Arc<H>,
    concurrency: usize,
    sub: S,
    progress: &Progress,
    n: usize,
    who: &str,
) -> Result<f64, crate::BenchError> {
    let consumer = postroom_core::Consumer::new(consumer_config(concurrency), handler);
    let book = Arc::new(super::timed::Book::default());
    let sub = super::timed::TimedSubscriber::new(sub, book.clone());
    let settled = book.settled();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let started = std::time::Instant::now();
    let task = tokio::spawn(async move { consumer.run(sub, stopped).await });
    let done = settled.wait_for(n, super::timeout(n)).await;
    let per_sec = super::rate(n, started.elapsed());
    let _ = stop.send(true);
    task.await
        .map_err(|e| crate::BenchError::Stalled(format!("consumer task: {e}")))?;
    if done {
        Ok(per_sec)
    } else {
        Err(crate::BenchError::Stalled(format!(
            "{who} settled {} of {n} (handled {})",
            settled.done(),
            progress.done()
        )))
    }
}

/// Messages per second from the first handled to the `n`-th (or an error when
/// [`timeout`](super::timeout) passes first); `who` names the consumer in the error.
pub async fn timed_from_first(
    progress: &Progress,
    n: usize,
    who: &str,
) -> Result<f64, crate::BenchError> {
    let limit = super::timeout(n);
    if !progress.wait_for(1, limit).await {
        return Err(crate::BenchError::Stalled(format!("{who} handled nothing")));
    }
    let (started, first) = (std::time::Instant::now(), progress.done());
    if !progress.wait_for(n, limit).await {
        return Err(crate::BenchError::Stalled(format!(
            "{who} handled {} of {n}",
            progress.done()
        )));
    }
    Ok(super::rate(n - first, started.elapsed()))
}

/// The consumer settings every bench consumer starts from.
#[must_use]
pub fn consumer_config(concurrency: usize) -> postroom_core::ConsumerConfig {
    let decoder = postroom_core::EnvelopeDecoder::new().accept(crate::payload::MESSAGE_TYPE, 1..=1);
    let mut cfg = postroom_core::ConsumerConfig::new(CONSUMER, decoder);
    cfg.concurrency = concurrency;
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::transport::{Delivery, Handback, ReceivedMessage};
    use postroom_core::{ParkedMessage, RetryPlan};
    use std::collections::VecDeque;

    /// Hands out its messages at once; once empty, each receive waits out its whole
    /// `max_wait`, as a broker's long poll does.
    struct Ready(VecDeque<ReceivedMessage>);

    struct Taken(ReceivedMessage);

    #[async_trait]
    impl Delivery for Taken {
        fn message(&self) -> &ReceivedMessage {
            &self.0
        }
        async fn ack(self) -> Result<(), Handback<Self>> {
            Ok(())
        }
        async fn retry(self, _: &RetryPlan) -> Result<(), Handback<Self>> {
            Ok(())
        }
        async fn park(self, _: &ParkedMessage) -> Result<(), Handback<Self>> {
            Ok(())
        }
    }

    #[async_trait]
    impl Subscriber for Ready {
        type Delivery = Taken;
        async fn next(&mut self, max_wait: Duration) -> postroom_core::Result<Option<Taken>> {
            match self.0.pop_front() {
                Some(m) => Ok(Some(Taken(m))),
                None => {
                    tokio::time::sleep(max_wait).await;
                    Ok(None)
                }
            }
        }
    }

    /// Counts and returns at once.
    struct Instant(Arc<Progress>);

    #[async_trait]
    impl Handler for Instant {
        async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
            self.0.tick();
            Ok(Handled::Applied)
        }
    }

    /// The clock of a consumer run stops when the last delivery is settled: the consumer's
    /// shutdown afterwards (it waits out the idle receive it is in, up to half a second) is
    /// not work, and the raw loops it is compared with stop at their last ack.
    #[tokio::test]
    async fn a_timed_consumer_stops_its_clock_at_the_last_settle_not_after_shutdown() {
        let n = 20;
        let queue = crate::payload::messages(0, n, 64)
            .into_iter()
            .map(|m| ReceivedMessage::new(Some(m.id), "orders", m.headers, m.body))
            .collect();
        let progress = Arc::new(Progress::default());
        let handler = Arc::new(Instant(progress.clone()));
        let per_sec = timed_consumer(handler, 4, Ready(queue), &progress, n, "test")
            .await
            .expect("every message handled");
        // Twenty messages handled at once take a few milliseconds; one idle receive 500 ms.
        assert!(
            per_sec > n as f64 / 0.5,
            "{per_sec} msg/s: the clock ran through the shutdown's idle receive"
        );
    }
}
