//! The subscriber of one consumer: a pull loop per durable (its routes' filters, its
//! partitions, its direct subject), merged into one stream of deliveries. Each durable holds
//! at most `prefetch` unsettled copies; a copy gives its permit back when it is settled or
//! dropped. `next` only reads the merged channel, so it is quick to return and safe to call
//! again; the pull requests live in the pull loops. [`NatsSubscriber::attach`] waits until
//! every pull loop's first request is on the server, so a program can tell it is ready.

mod puller;
pub mod received;

use crate::config::NatsConfig;
use crate::connection::NatsConnection;
use crate::delivery::{DeliveryContext, NatsDelivery};
use crate::naming::{self, lanes};
use crate::retry_book::RetryBook;
use postroom_core::transport::check_prefetch;
use postroom_core::{Error, ErrorKind, Result, Subscriber};
use puller::Puller;
use received::Describe;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// How long [`NatsSubscriber::attach`] waits for the server to hold every first pull request.
const ATTACH_WITHIN: Duration = Duration::from_secs(30);

/// A [`Subscriber`] over a consumer's durables.
pub struct NatsSubscriber {
    rx: mpsc::Receiver<NatsDelivery>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    consumer: String,
    /// One per pull loop whose first request the server may not hold yet.
    unattached: Vec<oneshot::Receiver<()>>,
}

postroom_core::debug_showing!(NatsSubscriber { consumer });

impl NatsSubscriber {
    /// Start pulling for `consumer` of `config` (its durables must exist: bind first), at most
    /// `prefetch` unsettled copies per durable.
    pub fn start(
        conn: NatsConnection,
        config: &NatsConfig,
        consumer: &str,
        prefetch: usize,
        book: Arc<RetryBook>,
    ) -> Result<Self> {
        check_prefetch(prefetch)?;
        let c = config.consumer(consumer).ok_or_else(|| {
            Error::new(
                ErrorKind::Config,
                format!("consumer {consumer:?} is not in the NATS topology"),
            )
        })?;
        let describe = Describe {
            prefix: config.prefix.clone(),
            partitioned: config.partitions() > 0,
            consumer: consumer.to_string(),
            raw: false,
        };
        Ok(Self::spawn(
            conn,
            config.only(consumer),
            naming::work_stream(&config.prefix),
            lanes(config, c),
            describe,
            prefetch,
            book,
        ))
    }

    /// Pull `lanes` of `stream` into one channel.
    pub(crate) fn spawn(
        conn: NatsConnection,
        only: NatsConfig,
        stream: String,
        lanes: Vec<naming::Lane>,
        describe: Describe,
        prefetch: usize,
        book: Arc<RetryBook>,
    ) -> Self {
        let consumer = describe.consumer.clone();
        let (tx, rx) = mpsc::channel(prefetch.saturating_mul(lanes.len()).max(1));
        let mut tasks = Vec::new();
        let mut unattached = Vec::new();
        for lane in lanes {
            let (attached, attached_rx) = oneshot::channel();
            unattached.push(attached_rx);
            let ctx = Arc::new(DeliveryContext {
                js: conn.jetstream().clone(),
                durable: lane.durable.clone(),
                parking_subject: naming::parking_subject(&only.prefix, &consumer),
                book: book.clone(),
            });
            let puller = Puller {
                conn: conn.clone(),
                config: only.clone(),
                stream: stream.clone(),
                permits: Arc::new(Semaphore::new(prefetch)),
                lane,
                describe: describe.clone(),
                ctx,
                tx: tx.clone(),
                attached: Some(attached),
            };
            tasks.push(tokio::spawn(puller.run()));
        }
        Self {
            rx,
            tasks,
            consumer,
            unattached,
        }
    }

    /// Wait until the server holds the first pull request of every durable (at most 30 s):
    /// once this returns, copies flow up to the prefetch without another round trip, so a
    /// program can tell it is ready. Returns at once when attached already. When it fails, the
    /// pull loops are stopped: the subscriber is closed.
    pub async fn attach(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.unattached);
        let all = futures::future::join_all(pending);
        let result = match tokio::time::timeout(ATTACH_WITHIN, all).await {
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "the pull requests of {} did not reach the server within {ATTACH_WITHIN:?}",
                    self.consumer
                ),
            )),
            Ok(answers) if answers.iter().any(Result::is_err) => Err(Error::new(
                ErrorKind::Closed,
                format!(
                    "a pull loop of {} stopped before it was attached",
                    self.consumer
                ),
            )),
            Ok(_) => Ok(()),
        };
        if result.is_err() {
            self.close().await;
        }
        result
    }
}

impl Drop for NatsSubscriber {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[async_trait::async_trait]
impl Subscriber for NatsSubscriber {
    type Delivery = NatsDelivery;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<NatsDelivery>> {
        match tokio::time::timeout(max_wait, self.rx.recv()).await {
            Err(_) => Ok(None),
            Ok(Some(d)) => Ok(Some(d)),
            Ok(None) => Err(Error::new(
                ErrorKind::Closed,
                format!("the pull loops of {} stopped", self.consumer),
            )),
        }
    }

    /// Stop pulling. Copies already pulled and not handed out are dropped unsettled: the
    /// server redelivers them after `ack_wait` (a plain nak would spend a delivery).
    async fn close(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.rx.close();
        while self.rx.try_recv().is_ok() {}
    }
}
