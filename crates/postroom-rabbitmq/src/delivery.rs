//! One RabbitMQ delivery and its settling acts: ack after commit; retry by publishing a
//! confirmed copy to the delay stage before acking (ack+publish) or by rejecting into the
//! dead-letter loop (reject+DLX); park by publishing a confirmed copy with diagnostics to
//! the parking queue before acking. A failed act hands the delivery back unacked and asks
//! for the consumer channel to be rebuilt, so the broker redelivers it (R9).

use crate::config::RetryStyle;
use crate::error::amqp;
use crate::naming::{ConsumerNames, PARKING_KEY};
use crate::parking::record::to_headers;
use crate::publisher::{ConfirmingPublisher, Outbound};
use lapin::acker::Acker;
use lapin::options::{BasicAckOptions, BasicRejectOptions};
use postroom_core::consumer::retry_headers;
use postroom_core::transport::Handback;
use postroom_core::{
    Delivery, Error, ErrorKind, MessageId, ParkedMessage, ReceivedMessage, RetryPlan,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// A delivery from a [`RabbitSubscriber`](crate::RabbitSubscriber).
#[derive(Debug)]
pub struct RabbitDelivery {
    pub(crate) acker: Acker,
    pub(crate) message: ReceivedMessage,
    /// False once the channel it came on was closed: acking it then could hit another
    /// delivery on a reused channel id, so it is refused.
    pub(crate) channel_alive: Arc<AtomicBool>,
    pub(crate) ctx: Arc<DeliveryContext>,
}

impl RabbitDelivery {
    fn id(&self) -> MessageId {
        self.message.id.unwrap_or_default()
    }

    fn fail(self, e: Error) -> Handback<Self> {
        self.ctx.rebuild.store(true, Ordering::SeqCst);
        (e, self)
    }

    fn check_alive(&self) -> Result<(), Error> {
        if self.channel_alive.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Closed,
                "the delivery's channel was closed; the broker redelivers the message",
            ))
        }
    }

    async fn ack_inner(self) -> Result<(), Handback<Self>> {
        if let Err(e) = self.check_alive() {
            return Err((e, self));
        }
        match self.acker.ack(BasicAckOptions::default()).await {
            Ok(()) => {
                self.ctx.settled_ok.store(true, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                let err = amqp("ack", e);
                Err(self.fail(err))
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

    async fn retry(self, plan: &RetryPlan) -> Result<(), Handback<Self>> {
        if let Err(e) = self.check_alive() {
            return Err((e, self));
        }
        match self.ctx.style {
            RetryStyle::AckPublish => {
                let headers = retry_headers(&self.message, plan);
                let key = ConsumerNames::stage_key(plan.stage_delay);
                let sent = self
                    .ctx
                    .publisher
                    .send(Outbound {
                        exchange: &self.ctx.names.retry_exchange,
                        routing_key: &key,
                        id: self.id(),
                        headers: &headers,
                        body: &self.message.body,
                    })
                    .await;
                match sent {
                    // The copy is confirmed and routed: only now the original may go.
                    Ok(()) => self.ack_inner().await,
                    Err(e) => {
                        tracing::error!(error = %e, stage = %key, "retry publish failed: original not acked, channel to be rebuilt");
                        Err(self.fail(e))
                    }
                }
            }
            RetryStyle::RejectDlx => match self
                .acker
                .reject(BasicRejectOptions { requeue: false })
                .await
            {
                // The work queue's policy dead-letters it (at least once) into the delay stage.
                Ok(()) => {
                    self.ctx.settled_ok.store(true, Ordering::SeqCst);
                    Ok(())
                }
                Err(e) => {
                    let err = amqp("reject into the retry loop", e);
                    Err(self.fail(err))
                }
            },
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
        match sent {
            Ok(()) => self.ack_inner().await,
            Err(e) => {
                tracing::error!(error = %e, "parking publish failed: the source queue keeps the message");
                Err(self.fail(e))
            }
        }
    }
}
