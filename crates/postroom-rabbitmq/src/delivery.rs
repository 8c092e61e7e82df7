//! One RabbitMQ delivery and its settling acts: ack after commit; retry (the two styles are
//! in the `retry` module); park by publishing a confirmed copy with diagnostics to the
//! parking queue before acking. A failed act hands the delivery back unacked and asks
//! for the consumer channel to be rebuilt, so the broker redelivers it.

use crate::config::RetryStyle;
use crate::error::amqp;
use crate::naming::{ConsumerNames, PARKING_KEY};
use crate::publisher::{ConfirmingPublisher, Outbound};
use lapin::acker::Acker;
use lapin::options::BasicAckOptions;
use postroom_core::failpoint;
use postroom_core::parking::codec::to_headers;
use postroom_core::transport::Handback;
use postroom_core::{
    Delivery, Error, ErrorKind, MessageId, ParkedMessage, ReceivedMessage, RetryPlan,
};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What the deliveries of one subscriber share with it.
#[derive(Debug)]
pub(crate) struct DeliveryContext {
    pub(crate) names: ConsumerNames,
    pub(crate) style: RetryStyle,
    pub(crate) publisher: Arc<ConfirmingPublisher>,
    /// Set by a failed settling act: the subscriber closes and reopens its channel (after a
    /// backoff), so the unacked delivery goes back to the queue.
    pub(crate) rebuild: AtomicBool,
    /// Set by a successful act: the link is healthy again, the rebuild backoff restarts.
    pub(crate) settled_ok: AtomicBool,
}

/// How long an ack or a reject may still take once the link began to close: the client
/// leaves the answer to a frame sent on a closing channel unresolved, and a consumer's
/// graceful shutdown waits for every delivery to settle.
const CLOSING_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl DeliveryContext {
    /// Run an ack or a reject, bounded: by the broker's confirm timeout, and by a short grace
    /// once the link began to close. Unanswered, the delivery is handed back; its channel
    /// goes away with the link, so the broker delivers it again.
    pub(crate) async fn settle_act(
        &self,
        what: &str,
        act: impl std::future::Future<Output = Result<(), lapin::Error>>,
    ) -> Result<(), Error> {
        let broker = self.publisher.broker().clone();
        let limit = broker.options().confirm_timeout;
        let closing = async {
            broker.until_closing().await;
            tokio::time::sleep(CLOSING_GRACE).await;
        };
        tokio::select! {
            r = tokio::time::timeout(limit, act) => match r {
                Ok(r) => r.map_err(|e| amqp(what, e)),
                Err(_) => Err(Error::new(
                    ErrorKind::Timeout,
                    format!("{what}: no answer from the broker within {limit:?}"),
                )),
            },
            () = closing => Err(Error::new(
                ErrorKind::Closed,
                format!("{what}: the broker link was closed (shutdown) first"),
            )),
        }
    }
}

/// What the deliveries of one consumer channel share with it.
#[derive(Debug)]
pub(crate) struct ChannelState {
    /// False once the channel was closed: acking a delivery then could hit another delivery
    /// on a reused channel id, so it is refused.
    pub(crate) alive: AtomicBool,
    /// Delivery tags handed out on the channel and not acknowledged or rejected yet. An ack
    /// with the `multiple` flag settles every unsettled tag up to its own, so it may only
    /// cover a run that holds no other delivery's tag (one still being handled, or handed
    /// back unacked, must come back from the broker, never be acknowledged by a neighbour).
    unsettled: Mutex<BTreeSet<u64>>,
}

impl ChannelState {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            alive: AtomicBool::new(true),
            unsettled: Mutex::default(),
        })
    }

    pub(crate) fn received(&self, tag: u64) {
        self.tags().insert(tag);
    }

    fn tags(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        self.unsettled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many of `tags` (ascending) are the channel's lowest unsettled tags in a row: a
    /// `multiple` ack of the last of them settles exactly those.
    fn leading_run(&self, tags: &[u64]) -> usize {
        self.tags()
            .iter()
            .zip(tags)
            .take_while(|(unsettled, tag)| unsettled == tag)
            .count()
    }
}

/// A delivery from a [`RabbitSubscriber`](crate::RabbitSubscriber).
#[derive(Debug)]
pub struct RabbitDelivery {
    pub(crate) acker: Acker,
    pub(crate) tag: u64,
    pub(crate) message: ReceivedMessage,
    pub(crate) channel: Arc<ChannelState>,
    pub(crate) ctx: Arc<DeliveryContext>,
}

impl RabbitDelivery {
    pub(crate) fn id(&self) -> MessageId {
        self.message.stable_id()
    }

    pub(crate) fn fail(self, e: Error) -> Handback<Self> {
        self.ctx.rebuild.store(true, Ordering::SeqCst);
        (e, self)
    }

    fn check_alive(&self) -> Result<(), Error> {
        if self.channel.alive.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Closed,
                "the delivery's channel was closed; the broker redelivers the message",
            ))
        }
    }

    pub(crate) async fn ack_inner(self) -> Result<(), Handback<Self>> {
        if let Err(e) = self.check_alive() {
            return Err((e, self));
        }
        let acked = self
            .ctx
            .settle_act("ack", self.acker.ack(BasicAckOptions::default()))
            .await;
        match acked {
            Ok(()) => {
                self.settled();
                self.ctx.publisher.broker().stats().record_ack_act(1);
                Ok(())
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Finish a copy-then-ack act once the copy's publish (`sent`: a retry's copy or a
    /// parking record, under routing key `key`) has an answer: only a copy the broker confirmed
    /// and routed lets this delivery be acked; a copy not made leaves it unacked (the broker
    /// delivers it again) and the channel to be rebuilt.
    pub(crate) async fn ack_after_copy(
        self,
        sent: Result<(), Error>,
        before_ack: &'static str,
        what: &str,
        key: &str,
    ) -> Result<(), Handback<Self>> {
        match sent {
            Ok(()) => {
                failpoint::hit(before_ack, &self.ctx.names.consumer).await;
                self.ack_inner().await
            }
            Err(e) => {
                if e.kind() == ErrorKind::Closed {
                    tracing::warn!(error = %e, %key, "{what} publish not made, the link was closed: the original is not acked, its queue keeps it");
                } else {
                    tracing::error!(error = %e, %key, "{what} publish failed: the original is not acked, its queue keeps it; channel to be rebuilt");
                }
                Err(self.fail(e))
            }
        }
    }

    /// The broker took this delivery's ack or reject.
    pub(crate) fn settled(&self) {
        self.channel.tags().remove(&self.tag);
        self.ctx.settled_ok.store(true, Ordering::SeqCst);
    }

    /// Acknowledge `run` (one channel's deliveries, ascending tags, the channel's lowest
    /// unsettled ones) with one `multiple` ack of its last tag.
    async fn ack_run(run: Vec<(usize, Self)>) -> Vec<(usize, Result<(), Handback<Self>>)> {
        let last = &run[run.len() - 1].1;
        let acked = match last.check_alive() {
            Ok(()) => {
                last.ctx
                    .settle_act("ack", last.acker.ack(BasicAckOptions { multiple: true }))
                    .await
            }
            Err(e) => Err(e),
        };
        match acked {
            Ok(()) => {
                let mut tags = last.channel.tags();
                for (_, d) in &run {
                    tags.remove(&d.tag);
                }
                drop(tags);
                last.ctx.settled_ok.store(true, Ordering::SeqCst);
                last.ctx
                    .publisher
                    .broker()
                    .stats()
                    .record_ack_act(run.len());
                run.into_iter().map(|(i, _)| (i, Ok(()))).collect()
            }
            Err(e) => {
                if e.kind() != ErrorKind::Closed {
                    last.ctx.rebuild.store(true, Ordering::SeqCst);
                }
                run.into_iter()
                    .map(|(i, d)| (i, Err((Error::new(e.kind(), e.to_string()), d))))
                    .collect()
            }
        }
    }
}

#[async_trait::async_trait]
impl Delivery for RabbitDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.message
    }

    async fn ack(self) -> Result<(), Handback<Self>> {
        self.ack_inner().await
    }

    /// The deliveries of a channel that are its lowest unsettled ones in a row go in one ack
    /// with the `multiple` flag; the others are acknowledged one by one.
    async fn ack_all(batch: Vec<Self>) -> Vec<Result<(), Handback<Self>>> {
        let total = batch.len();
        let mut channels: Vec<Vec<(usize, Self)>> = Vec::new();
        for (i, d) in batch.into_iter().enumerate() {
            match channels
                .iter_mut()
                .find(|c| Arc::ptr_eq(&c[0].1.channel, &d.channel))
            {
                Some(c) => c.push((i, d)),
                None => channels.push(vec![(i, d)]),
            }
        }
        let mut acts: Vec<
            futures::future::BoxFuture<'static, Vec<(usize, Result<(), Handback<Self>>)>>,
        > = Vec::new();
        for mut c in channels {
            c.sort_by_key(|(_, d)| d.tag);
            let tags: Vec<u64> = c.iter().map(|(_, d)| d.tag).collect();
            let run = c[0].1.channel.leading_run(&tags);
            let singles = c.split_off(if run >= 2 { run } else { 0 });
            if !c.is_empty() {
                acts.push(Box::pin(Self::ack_run(c)));
            }
            for (i, d) in singles {
                acts.push(Box::pin(async move { vec![(i, d.ack_inner().await)] }));
            }
        }
        let mut done: Vec<(usize, Result<(), Handback<Self>>)> = futures::future::join_all(acts)
            .await
            .into_iter()
            .flatten()
            .collect();
        debug_assert_eq!(done.len(), total, "one result per delivery");
        done.sort_by_key(|(i, _)| *i);
        let mut results = Vec::with_capacity(total);
        for (_, r) in done {
            results.push(r);
        }
        results
    }

    async fn retry(self, plan: &RetryPlan) -> Result<(), Handback<Self>> {
        if let Err(e) = self.check_alive() {
            return Err((e, self));
        }
        match self.ctx.style {
            RetryStyle::AckPublish => crate::retry::publish_then_ack(self, plan).await,
            RetryStyle::RejectDlx => crate::retry::reject_into_loop(self).await,
        }
    }

    async fn park(self, record: &ParkedMessage) -> Result<(), Handback<Self>> {
        if let Err(e) = self.check_alive() {
            return Err((e, self));
        }
        let headers = to_headers(record);
        let sent = self
            .ctx
            .publisher
            .send(Outbound {
                exchange: &self.ctx.names.dlx_exchange,
                routing_key: PARKING_KEY,
                id: record.message_id,
                headers: &headers,
                body: &record.body,
            })
            .await;
        self.ack_after_copy(sent, failpoint::PARK_BEFORE_ACK, "parking", PARKING_KEY)
            .await
    }
}
