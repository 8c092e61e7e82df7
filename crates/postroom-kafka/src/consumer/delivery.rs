//! One Kafka delivery and its settling acts. Ack: the record is done; its offset is stored once
//! every earlier record of its partition is done too. Retry: a copy with the same id, the next
//! attempt and its due time goes to the stage topic, and only after that copy's delivery report
//! is the original done (blocking mode: the record is held in its partition until the delay
//! passed, and nothing behind it moves). Park: a copy with every diagnostic goes to the parking
//! topic, then the original is done. A failed act hands the delivery back; a delivery dropped
//! unsettled has its partition read again from there (after a growing pause, so a broken
//! retry route does not turn into a hot loop).

use super::record::Record;
use super::state::Settled;
use super::subscriber::DeliveryContext;
use crate::config::RetryOrdering;
use crate::headers::set_due_in;
use crate::producer::{Outbound, TRANSPORT};
use postroom_core::metrics as m;
use postroom_core::parking::codec::to_headers;
use postroom_core::retry::retry_headers;
use postroom_core::transport::Handback;
use postroom_core::{Delivery, ParkedMessage, ReceivedMessage, RetryPlan};
use std::sync::Arc;

/// A delivery from a [`KafkaSubscriber`](super::KafkaSubscriber).
pub struct KafkaDelivery {
    pub(crate) message: ReceivedMessage,
    pub(crate) record: Record,
    pub(crate) generation: u64,
    pub(crate) key: Option<String>,
    pub(crate) ctx: Arc<DeliveryContext>,
    pub(crate) settled: bool,
}

postroom_core::debug_showing!(KafkaDelivery {
    topic: record.topic,
    partition: record.partition,
    offset: record.offset
});

impl KafkaDelivery {
    /// Topic, partition and offset of the record.
    #[must_use]
    pub fn position(&self) -> (&str, i32, i64) {
        (
            &self.record.topic,
            self.record.partition,
            self.record.offset,
        )
    }

    fn done(&mut self, resolved: bool) {
        self.settled = true;
        let outcome =
            self.ctx
                .shared
                .settle(&self.record.tp(), self.record.offset, self.generation);
        self.after(outcome, resolved);
    }

    fn after(&self, outcome: Settled, resolved: bool) {
        if outcome == Settled::OwnershipLost {
            metrics::counter!(m::OWNERSHIP_LOST, "consumer" => self.ctx.names.consumer.clone(), "transport" => TRANSPORT).increment(1);
            tracing::info!(consumer = %self.ctx.names.consumer, topic = %self.record.topic, partition = self.record.partition, offset = self.record.offset, "partition no longer owned: its new owner gets this record again (the inbox absorbs it)");
        }
        self.ctx.settled_ok();
        if let Some(key) = &self.key {
            if resolved && let Some(id) = self.message.id {
                self.ctx.chains.resolved(key, id);
            }
            self.ctx.chains.release(key);
        }
    }
}

impl Drop for KafkaDelivery {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let pause = self.ctx.rewind_pause();
        self.ctx
            .shared
            .dropped(self.record.tp(), self.record.offset, self.generation, pause);
        if let Some(key) = &self.key {
            self.ctx.chains.release(key);
        }
    }
}

#[async_trait::async_trait]
impl Delivery for KafkaDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.message
    }

    async fn ack(mut self) -> Result<(), Handback<Self>> {
        self.done(true);
        Ok(())
    }

    async fn retry(mut self, plan: &RetryPlan) -> Result<(), Handback<Self>> {
        let headers = retry_headers(&self.message, plan);
        if self.ctx.ordering == RetryOrdering::Blocking {
            let mut record = self.record.clone();
            record.headers = headers;
            self.settled = true;
            let outcome = self.ctx.shared.requeue(record, self.generation, plan.delay);
            self.after(outcome, false);
            return Ok(());
        }
        let mut headers = headers;
        set_due_in(&mut headers, plan.stage_delay);
        let topic = self.ctx.names.retry(plan.stage_delay);
        let sent = self
            .ctx
            .producer
            .send(Outbound {
                topic: &topic,
                key: self.key.as_deref().or(self.record.key.as_deref()),
                id: self.message.stable_id(),
                headers: &headers,
                body: &self.message.body,
            })
            .await;
        match sent {
            // The copy is confirmed: only now may the original's offset move past it.
            Ok(()) => {
                if let (Some(key), Some(id)) = (&self.key, self.message.id) {
                    self.ctx.chains.placed(key, id, plan.stage);
                }
                self.done(false);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, topic = %topic, "retry publish failed: the original is not done");
                Err((e, self))
            }
        }
    }

    async fn park(mut self, record: &ParkedMessage) -> Result<(), Handback<Self>> {
        let headers = to_headers(record);
        let sent = self
            .ctx
            .producer
            .send(Outbound {
                topic: &self.ctx.names.parking,
                key: self.record.key.as_deref(),
                id: record.message_id,
                headers: &headers,
                body: &record.body,
            })
            .await;
        match sent {
            Ok(()) => {
                self.done(true);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "parking publish failed: the source partition keeps the record");
                Err((e, self))
            }
        }
    }
}
