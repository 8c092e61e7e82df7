//! A consumer loop running in the background, and its graceful stop.

use postroom_core::consumer::Consumer;
use postroom_core::stats::{ConsumerStats, StatsSnapshot};
use postroom_core::{Handler, Subscriber};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A consumer running in the background.
pub struct Running {
    /// Sends the shutdown.
    pub stop: watch::Sender<bool>,
    /// The consumer loop.
    pub task: tokio::task::JoinHandle<()>,
    /// The loop's counters.
    pub stats: Arc<ConsumerStats>,
}

impl Running {
    /// Run `body`, a consumer loop that ends once its receiver says stop and counts into
    /// `stats`, in the background.
    pub fn start<F, Fut>(stats: Arc<ConsumerStats>, body: F) -> Self
    where
        F: FnOnce(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(body(rx));
        Self { stop, task, stats }
    }

    /// Graceful stop (the subscriber goes away: unacked deliveries return), and the loop's
    /// final counters. A loop that does not stop within 30 s, or that panicked, fails the
    /// test.
    pub async fn stop(self) -> StatsSnapshot {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the consumer loop stops within 30 s of its shutdown")
            .expect("the consumer loop ends without a panic");
        self.stats.snapshot()
    }
}

/// Run `consumer` on `sub` in the background.
pub fn spawn<H, S>(consumer: Consumer<H>, sub: S) -> Running
where
    H: Handler + ?Sized + 'static,
    S: Subscriber + 'static,
{
    Running::start(consumer.stats(), move |rx| async move {
        consumer.run(sub, rx).await
    })
}

/// A relay of the fault tests in the background until `shutdown`: relay `id`, batches of
/// `batch`, rows leased for `lease`, an empty outbox looked at again every 50 ms, a failed
/// publish tried again after 200 ms, published rows kept.
pub fn spawn_relay(
    outbox: Arc<dyn postroom_core::OutboxStore>,
    publisher: Arc<dyn postroom_core::Publisher>,
    id: &str,
    batch: usize,
    lease: Duration,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let relay = postroom_core::OutboxRelay::new(
        outbox,
        publisher,
        postroom_core::RelayConfig {
            relay_id: id.into(),
            batch_size: batch,
            lease,
            idle_wait: Duration::from_millis(50),
            retry_after: Duration::from_millis(200),
            retention: None,
            lanes: 1,
        },
    );
    tokio::spawn(async move { relay.run(shutdown).await })
}

/// Inbox-queue settings for `consumer` (accepting `order.created` v1, a 5 s handler timeout)
/// as the tests use them: rows leased for 10 s, an empty table looked at again every 20 ms;
/// the rest the defaults, for the caller to change.
#[cfg(feature = "postgres")]
pub fn inbox_queue_config(consumer: &str) -> postroom_postgres::InboxQueueConfig {
    let mut cc = postroom_core::ConsumerConfig::new(
        consumer,
        postroom_core::EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cc.handler_timeout = Duration::from_secs(5);
    let mut cfg = postroom_postgres::InboxQueueConfig::new(cc);
    cfg.lease = Duration::from_secs(10);
    cfg.poll_interval = Duration::from_millis(20);
    cfg
}

/// `queue`'s ingest of `sub` (each delivery stored, then acked) in the background until
/// `shutdown`.
#[cfg(feature = "postgres")]
pub fn spawn_ingest<S>(
    queue: &postroom_postgres::InboxQueue,
    sub: S,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()>
where
    S: Subscriber + 'static,
{
    let queue = queue.clone();
    tokio::spawn(async move { queue.ingest(sub, shutdown).await })
}

/// `queue`'s workers running `handler` in the background until `shutdown`.
#[cfg(feature = "postgres")]
pub fn spawn_workers<H>(
    queue: &postroom_postgres::InboxQueue,
    handler: Arc<H>,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()>
where
    H: Handler + ?Sized + 'static,
{
    let queue = queue.clone();
    tokio::spawn(async move { queue.run_workers(handler, shutdown).await })
}
