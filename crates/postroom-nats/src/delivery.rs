//! One JetStream delivery and its settling acts, each confirmed by the server (double ack):
//! ack after the commit; retry as a nak carrying the plan's delay (never a plain nak, which
//! redelivers at once); park by publishing the copy with every diagnostic to the consumer's
//! parking subject, waiting for its PubAck, and only then acknowledging the original. While a
//! delivery is unsettled a Progress heartbeat keeps it owned (a handler may outlive
//! `ack_wait`); heartbeats stop before any settling act is sent, so a late `+WPI` can never
//! restart the clock of a delayed nak.

use crate::error::from_publish;
use crate::headers::to_nats;
use crate::retry_book::RetryBook;
use async_nats::jetstream::AckKind;
use async_nats::jetstream::message::Acker;
use postroom_core::parking::codec::to_headers;
use postroom_core::transport::Handback;
use postroom_core::{Delivery, Error, ErrorKind, ParkedMessage, ReceivedMessage, RetryPlan};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, OwnedSemaphorePermit, oneshot};

/// What the deliveries of one durable share.
#[derive(Debug)]
pub(crate) struct DeliveryContext {
    pub(crate) js: async_nats::jetstream::Context,
    pub(crate) durable: String,
    pub(crate) parking_subject: String,
    pub(crate) book: Arc<RetryBook>,
}

/// A delivery from a [`NatsSubscriber`](crate::NatsSubscriber).
pub struct NatsDelivery {
    pub(crate) message: ReceivedMessage,
    pub(crate) stream_seq: u64,
    pub(crate) acker: Arc<Acker>,
    pub(crate) ctx: Arc<DeliveryContext>,
    /// True once settling began: the heartbeat task sends nothing more.
    pub(crate) stopped: Arc<Mutex<bool>>,
    /// Dropped with the delivery: ends its heartbeat task.
    pub(crate) _alive: oneshot::Sender<()>,
    /// The subscriber's hold on one unsettled delivery (its prefetch).
    pub(crate) _permit: OwnedSemaphorePermit,
}

postroom_core::debug_showing!(NatsDelivery {
    durable: ctx.durable,
    stream_seq
});

impl NatsDelivery {
    /// The stream sequence of this copy.
    #[must_use]
    pub fn stream_sequence(&self) -> u64 {
        self.stream_seq
    }

    async fn stop_heartbeats(&self) {
        *self.stopped.lock().await = true;
    }

    async fn settle(&self, kind: AckKind, what: &str) -> Result<(), Error> {
        self.stop_heartbeats().await;
        self.acker.double_ack_with(kind).await.map_err(|e| {
            Error::new(
                ErrorKind::Connection,
                format!(
                    "{what} of stream sequence {} on {} not confirmed by the server: {e}",
                    self.stream_seq, self.ctx.durable
                ),
            )
        })
    }
}

/// Keep `acker`'s delivery owned with a Progress heartbeat every `every`, until the delivery
/// is dropped, settling starts (`stopped`), or `limit` passes (a hung handler then loses it).
pub(crate) fn spawn_heartbeat(
    acker: Arc<Acker>,
    stopped: Arc<Mutex<bool>>,
    mut alive: oneshot::Receiver<()>,
    every: Duration,
    limit: Duration,
) {
    tokio::spawn(async move {
        let started = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = &mut alive => return,
            }
            if started.elapsed() >= limit {
                tracing::warn!(
                    held_for_s = started.elapsed().as_secs(),
                    "delivery unsettled for the longest time heartbeats keep it: left to the server's redelivery"
                );
                return;
            }
            let guard = stopped.lock().await;
            if *guard {
                return;
            }
            if let Err(e) = acker.ack_with(AckKind::Progress).await {
                tracing::debug!(error = %e, "progress heartbeat not sent");
            }
            drop(guard);
        }
    });
}

#[async_trait::async_trait]
impl Delivery for NatsDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.message
    }

    async fn ack(self) -> Result<(), Handback<Self>> {
        match self.settle(AckKind::Ack, "ack").await {
            Ok(()) => {
                self.ctx.book.forget(&self.ctx.durable, self.stream_seq);
                Ok(())
            }
            Err(e) => Err((e, self)),
        }
    }

    /// A nak with the plan's delay: the server keeps the copy and redelivers it no earlier
    /// than the delay after the nak. It stays pending meanwhile (it counts against
    /// `max_ack_pending`).
    async fn retry(self, plan: &RetryPlan) -> Result<(), Handback<Self>> {
        let delay = plan.delay.max(Duration::from_millis(1));
        match self.settle(AckKind::Nak(Some(delay)), "delayed nak").await {
            Ok(()) => {
                self.ctx
                    .book
                    .record(&self.ctx.durable, self.stream_seq, plan);
                Ok(())
            }
            Err(e) => Err((e, self)),
        }
    }

    async fn park(self, record: &ParkedMessage) -> Result<(), Handback<Self>> {
        self.stop_heartbeats().await;
        let dedup = format!("park:{}:{}", self.ctx.durable, self.stream_seq);
        let headers = match to_nats(record.message_id, Some(&dedup), &to_headers(record)) {
            Ok(h) => h,
            Err(e) => return Err((e, self)),
        };
        let doing = format!(
            "parking {} on {}",
            record.message_id, self.ctx.parking_subject
        );
        let sent = match self
            .ctx
            .js
            .publish_with_headers(
                self.ctx.parking_subject.clone(),
                headers,
                bytes::Bytes::from(record.body.clone()),
            )
            .await
        {
            Ok(ack) => ack.await.map_err(|e| from_publish(&doing, &e)),
            Err(e) => Err(from_publish(&doing, &e)),
        };
        if let Err(e) = sent {
            tracing::error!(error = %e, "parking publish failed: the work stream keeps the message");
            return Err((e, self));
        }
        postroom_core::failpoint::hit(postroom_core::failpoint::PARK_BEFORE_ACK, &record.consumer)
            .await;
        match self.settle(AckKind::Ack, "ack after parking").await {
            Ok(()) => {
                self.ctx.book.forget(&self.ctx.durable, self.stream_seq);
                Ok(())
            }
            Err(e) => Err((e, self)),
        }
    }
}
