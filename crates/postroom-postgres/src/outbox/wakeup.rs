//! Waking relays when outbox rows arrive: `LISTEN {prefix}outbox` on a dedicated connection,
//! with plain sleeping as the fallback while that connection cannot be had.

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// A lazily connected listener on one channel.
#[derive(Debug)]
pub(crate) struct Wakeup {
    pool: PgPool,
    channel: String,
    listener: Mutex<Option<PgListener>>,
}

impl Wakeup {
    pub(crate) fn new(pool: PgPool, channel: String) -> Self {
        Self {
            pool,
            channel,
            listener: Mutex::new(None),
        }
    }

    /// Return when a notification arrives or `max_wait` passes, whichever is first.
    pub(crate) async fn wait(&self, max_wait: Duration) {
        let deadline = Instant::now() + max_wait;
        let Ok(mut guard) = tokio::time::timeout_at(deadline, self.listener.lock()).await else {
            return;
        };
        if guard.is_none() {
            match self.connect().await {
                Ok(l) => *guard = Some(l),
                Err(e) => tracing::debug!(error = %e, "outbox LISTEN unavailable; polling"),
            }
        }
        let Some(listener) = guard.as_mut() else {
            tokio::time::sleep_until(deadline).await;
            return;
        };
        match tokio::time::timeout_at(deadline, listener.recv()).await {
            Ok(Ok(_)) => {
                // Fold notifications that queued up meanwhile into this wake-up.
                while listener.next_buffered().is_some() {}
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "outbox LISTEN connection lost; polling until it is back");
                *guard = None;
                drop(guard);
                tokio::time::sleep_until(deadline).await;
            }
            Err(_) => {}
        }
    }

    async fn connect(&self) -> Result<PgListener, sqlx::Error> {
        let mut l = PgListener::connect_with(&self.pool).await?;
        l.listen(&self.channel).await?;
        Ok(l)
    }
}
