//! The consumer side every PostgreSQL scenario shares: a handler that claims the inbox row and
//! applies the business update in one transaction, and a progress counter to wait on.

use crate::resources::pg::EFFECT_SQL;
use crate::resources::rabbit::CONSUMER;
use postroom_core::{Envelope, Handled, Handler, HandlerError, Incoming, async_trait};
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

/// Run `handler` as postroom's consumer with `concurrency` on `sub` until `progress` counts
/// `n` (or [`timeout`](super::timeout) passes); messages per second. `who` names it
/// in the error.
pub async fn timed_consumer<H: Handler + 'static, S: postroom_core::Subscriber>(
    handler: Arc<H>,
    concurrency: usize,
    sub: S,
    progress: &Progress,
    n: usize,
    who: &str,
) -> Result<f64, crate::BenchError> {
    let consumer = postroom_core::Consumer::new(consumer_config(concurrency), handler);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let started = std::time::Instant::now();
    let task = tokio::spawn(async move { consumer.run(sub, stopped).await });
    let done = progress.wait_for(n, super::timeout(n)).await;
    let _ = stop.send(true);
    task.await
        .map_err(|e| crate::BenchError::Stalled(format!("consumer task: {e}")))?;
    // Shutting down (the last acks) is part of the run.
    let per_sec = super::rate(n, started.elapsed());
    if done {
        Ok(per_sec)
    } else {
        Err(crate::BenchError::Stalled(format!(
            "{who} handled {} of {n}",
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
