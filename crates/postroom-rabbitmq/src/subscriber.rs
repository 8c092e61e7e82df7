//! The subscriber: a consumer channel on one queue with a bounded prefetch (0 is refused),
//! manual acks only. The channel is rebuilt when the broker cancels the consumer, when the
//! channel fails, or when a settling act failed, with a bounded, jittered backoff between
//! rebuilds so a broken retry route never turns into a reconnect storm.

use crate::config::{RetryStyle, TopologyConfig};
use crate::delivery::{ChannelState, DeliveryContext, RabbitDelivery};
use crate::error::amqp;
use crate::headers::{from_field_table, loops_from, x_deaths};
use crate::naming::ConsumerNames;
use crate::publisher::ConfirmingPublisher;
use crate::{Broker, stats::LinkStats};
use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use postroom_core::backoff::Backoff;
use postroom_core::message::headers as h;
use postroom_core::parking::codec as park;
use postroom_core::{Error, ErrorKind, MessageId, ReceivedMessage, Result, Subscriber};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Subscriber settings.
#[derive(Clone, Debug)]
pub struct SubscriberOptions {
    /// Unacked deliveries the broker may send ahead. Required: 0 (unbounded) is refused.
    pub prefetch: u16,
    /// Consume this queue instead of the consumer's work queue (a partition queue); retries
    /// and parking still go through the consumer's exchanges.
    pub queue: Option<String>,
    /// First delay between channel rebuilds.
    pub rebuild_min: Duration,
    /// Longest delay between channel rebuilds.
    pub rebuild_max: Duration,
    /// The queue is a dead-letter place (a parking queue): what the broker recorded in
    /// `x-death` about copies it dead-lettered by itself is described in postroom's
    /// `x-dead-letter-*` headers for the parking ingest.
    pub dead_letters: bool,
}

impl SubscriberOptions {
    /// Options with this prefetch and default rebuild delays (0.5 s up to 30 s).
    #[must_use]
    pub fn new(prefetch: u16) -> Self {
        Self {
            prefetch,
            queue: None,
            rebuild_min: Duration::from_millis(500),
            rebuild_max: Duration::from_secs(30),
            dead_letters: false,
        }
    }
}

struct Link {
    channel: Channel,
    consumer: Consumer,
    state: Arc<ChannelState>,
}

/// A [`Subscriber`] on a RabbitMQ queue.
pub struct RabbitSubscriber {
    broker: Arc<Broker>,
    ctx: Arc<DeliveryContext>,
    queue: String,
    options: SubscriberOptions,
    link: Option<Link>,
    backoff: Backoff,
    stats: Arc<LinkStats>,
}

/// A subscriber dropped without [`close`](Subscriber::close) (a task aborted, a process
/// tearing down): its channel is no longer kept open by the broker's list, so the client closes
/// it with the last handle and the broker requeues what it had delivered.
impl Drop for RabbitSubscriber {
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            link.state.alive.store(false, Ordering::SeqCst);
            self.broker.forget(&link.channel);
        }
    }
}

postroom_core::debug_showing!(RabbitSubscriber { queue });

impl RabbitSubscriber {
    /// A subscriber for `consumer` of `config`, settling through `publisher`. The channel is
    /// opened by [`attach`](Self::attach), or else on the first [`next`](Subscriber::next).
    pub fn new(
        broker: Arc<Broker>,
        publisher: Arc<ConfirmingPublisher>,
        config: &TopologyConfig,
        consumer: &str,
        options: SubscriberOptions,
    ) -> Result<Self> {
        if options.prefetch == 0 {
            return Err(Error::new(
                ErrorKind::Config,
                "prefetch 0 means unbounded in AMQP: set a prefetch of at least 1 (e.g. 2 x consumer concurrency)",
            ));
        }
        let names = ConsumerNames::new(&config.prefix, consumer);
        let queue = options
            .queue
            .clone()
            .unwrap_or_else(|| names.work_queue.clone());
        let stats = broker.stats();
        let ctx = Arc::new(DeliveryContext {
            names,
            style: config.retry_style,
            publisher,
            rebuild: AtomicBool::new(false),
            settled_ok: AtomicBool::new(false),
        });
        let backoff = Backoff::new(options.rebuild_min, options.rebuild_max);
        Ok(Self {
            broker,
            ctx,
            queue,
            options,
            link: None,
            backoff,
            stats,
        })
    }

    /// The queue consumed.
    #[must_use]
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Open the consumer channel now instead of on the first [`next`](Subscriber::next):
    /// once this returns, the broker knows the consumer (it shows in the queue's consumer
    /// count and deliveries flow up to the prefetch), so a program can tell it is ready.
    /// Does nothing when the channel is open already.
    pub async fn attach(&mut self) -> Result<()> {
        if self.link.is_none() {
            self.open().await?;
        }
        Ok(())
    }

    /// True while the consumer channel is open.
    #[must_use]
    pub fn is_attached(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|l| l.channel.status().connected())
    }

    async fn drop_link(&mut self) {
        if let Some(link) = self.link.take() {
            link.state.alive.store(false, Ordering::SeqCst);
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                link.channel.close(200, "postroom: rebuilding channel"),
            )
            .await;
        }
    }

    async fn open(&mut self) -> Result<()> {
        let channel = self.broker.channel().await?;
        self.broker
            .bounded(
                "setting prefetch",
                channel.basic_qos(self.options.prefetch, BasicQosOptions::default()),
            )
            .await?;
        let tag = format!(
            "postroom-{}-{}",
            self.ctx.names.consumer,
            &uuid::Uuid::now_v7().simple().to_string()[20..]
        );
        let consumer = self
            .broker
            .bounded(
                &format!("consuming {}", self.queue),
                channel.basic_consume(
                    &self.queue,
                    &tag,
                    BasicConsumeOptions {
                        no_ack: false,
                        ..BasicConsumeOptions::default()
                    },
                    FieldTable::default(),
                ),
            )
            .await?;
        self.link = Some(Link {
            channel,
            consumer,
            state: ChannelState::new(),
        });
        Ok(())
    }

    fn received(&self, d: &lapin::message::Delivery) -> ReceivedMessage {
        let mut headers = from_field_table(d.properties.headers().as_ref());
        if self.ctx.style == RetryStyle::RejectDlx {
            // The broker moved the message, so postroom's own header could not be updated:
            // the loop count is the broker's record of rejections from the work queue.
            let deaths = x_deaths(d.properties.headers().as_ref());
            let loops = loops_from(&deaths, &self.ctx.names.work_queue);
            headers.insert(h::RETRY_ATTEMPT.into(), loops.to_string());
            if let Some(first) = deaths
                .iter()
                .filter(|x| x.queue == self.ctx.names.work_queue)
                .filter_map(|x| x.time)
                .min()
            {
                headers
                    .entry(h::FIRST_FAILURE_AT.into())
                    .or_insert_with(|| first.to_rfc3339());
            }
        }
        if self.options.dead_letters && !headers.contains_key(h::PARKED_BY) {
            // Dead-lettered by the broker itself (a delivery limit, a rejection): describe it
            // from the most recent x-death entry other than a retry stage's expiry.
            let deaths = x_deaths(d.properties.headers().as_ref());
            if let Some(x) = deaths.iter().find(|x| x.reason != "expired") {
                headers.insert(park::DEAD_LETTER_REASON.into(), x.reason.clone());
                headers.insert(park::DEAD_LETTERED_FROM.into(), x.queue.clone());
                headers.insert(park::DEAD_LETTER_COUNT.into(), x.count.to_string());
                if let Some(t) = x.time {
                    headers.insert(park::DEAD_LETTERED_AT.into(), t.to_rfc3339());
                }
            }
        }
        // A quorum queue counts earlier deliveries of this copy in `x-delivery-count`.
        let earlier: u32 = headers
            .get("x-delivery-count")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        ReceivedMessage::new(
            d.properties
                .message_id()
                .as_ref()
                .and_then(|s| s.as_str().parse::<MessageId>().ok()),
            d.routing_key.as_str(),
            headers,
            d.data.clone(),
        )
        .redelivered(d.redelivered)
        .deliveries(earlier.saturating_add(1))
    }
}

#[async_trait::async_trait]
impl Subscriber for RabbitSubscriber {
    type Delivery = RabbitDelivery;

    async fn close(&mut self) {
        self.drop_link().await;
    }

    async fn next(&mut self, max_wait: Duration) -> Result<Option<RabbitDelivery>> {
        if self.ctx.rebuild.swap(false, Ordering::SeqCst) && self.link.is_some() {
            self.drop_link().await;
            self.stats.record_channel_rebuild();
            if self.ctx.settled_ok.swap(false, Ordering::SeqCst) {
                self.backoff.reset();
            }
            let pause = self.backoff.next_delay();
            tracing::warn!(queue = %self.queue, pause_ms = pause.as_millis() as u64, "settling failed: rebuilding the consumer channel after a pause");
            tokio::time::sleep(pause).await;
        }
        if self.link.is_none() {
            self.open().await?;
        }
        let link = self.link.as_mut().expect("link just opened");
        match tokio::time::timeout(max_wait, link.consumer.next()).await {
            Err(_) => Ok(None),
            Ok(None) => {
                self.stats.record_cancellation();
                self.drop_link().await;
                Err(Error::new(
                    ErrorKind::Closed,
                    format!("the broker cancelled the consumer of {}", self.queue),
                ))
            }
            Ok(Some(Err(e))) => {
                self.drop_link().await;
                Err(amqp(format!("consuming {}", self.queue), e))
            }
            Ok(Some(Ok(d))) => {
                let channel = self
                    .link
                    .as_ref()
                    .map(|l| l.state.clone())
                    .expect("link present");
                channel.received(d.delivery_tag);
                let message = self.received(&d);
                Ok(Some(RabbitDelivery {
                    acker: d.acker,
                    tag: d.delivery_tag,
                    message,
                    channel,
                    ctx: self.ctx.clone(),
                }))
            }
        }
    }
}
