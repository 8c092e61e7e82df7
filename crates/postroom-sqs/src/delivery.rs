//! One received message and its settling acts, in SQS's terms:
//! - **ack** deletes the message (through the batching deleter), after the handler committed;
//! - **retry** hides it for the plan's delay (`ChangeMessageVisibility`, in whole seconds,
//!   rounded up so no retry is early), after recording the error in the last-error log; the
//!   next receive's count is the next attempt (see [`crate::attempt`]);
//! - **park** sends a copy with every diagnostic to the DLQ, then deletes the original.
//!
//! A failed act hands the delivery back with the error; the lease keeps it hidden meanwhile.
//! When the lease was lost (see [`crate::lease`]) an act still goes ahead where it can help
//! (delete, park) and is counted; a retry then has nothing to hide — the message is already
//! out again.

use crate::codec::encode;
use crate::config::SQS_MAX_VISIBILITY;
use crate::deleter::Deleted;
use crate::error::{code_of, is_ownership_lost, sdk};
use crate::lease::{Held, Lease};
use crate::send::{Entry, group_id, send_to_queue};
use crate::subscriber::QueueContext;
use postroom_core::failpoint;
use postroom_core::message::{headers as h, truncate};
use postroom_core::parking::LastError;
use postroom_core::parking::codec::to_headers;
use postroom_core::retry::headers::MAX_HEADER_ERROR_CHARS;
use postroom_core::transport::Handback;
use postroom_core::{
    Delivery, Error, ErrorKind, MessageId, ParkedMessage, ReceivedMessage, RetryPlan,
};
use std::sync::Arc;
use std::time::Duration;

/// A delivery from an [`SqsSubscriber`](crate::SqsSubscriber).
#[derive(Debug)]
pub struct SqsDelivery {
    pub(crate) ctx: Arc<QueueContext>,
    pub(crate) message: ReceivedMessage,
    pub(crate) lease: Lease,
}

/// Whole seconds of visibility for a retry after `delay`: rounded up, at least 1.
#[must_use]
pub fn retry_seconds(delay: Duration) -> u64 {
    let whole = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    whole.max(1)
}

impl SqsDelivery {
    fn id(&self) -> MessageId {
        self.message.stable_id()
    }

    /// Delete the message under `held`; forget its last error once deleted.
    async fn delete(self, mut held: Held) -> Result<(), Handback<Self>> {
        held.check_lost();
        match self.ctx.deleter.delete(&self.lease.receipt).await {
            Ok(outcome) => {
                if outcome == Deleted::HandleGone {
                    held.mark_lost();
                }
                held.settle();
                // Only a message received before (or a dead-lettered copy) can have a record:
                // a first receive costs the log nothing.
                if (self.message.redelivered || self.ctx.dead_letters.is_some())
                    && let Err(e) = self
                        .ctx
                        .last_errors
                        .forget(&self.ctx.consumer, self.id())
                        .await
                {
                    tracing::debug!(error = %e, "last-error log: forget failed");
                }
                Ok(())
            }
            Err(e) => {
                drop(held);
                Err((e, self))
            }
        }
    }

    async fn record_error(&self, plan: &RetryPlan) {
        let now = chrono::Utc::now();
        let error = LastError {
            first_failure_at: now,
            at: now,
            class: plan.error_class,
            code: plan.error_code.clone(),
            message: truncate(&plan.error_message, MAX_HEADER_ERROR_CHARS),
        };
        if let Err(e) = self
            .ctx
            .last_errors
            .record(&self.ctx.consumer, self.id(), error)
            .await
        {
            tracing::warn!(error = %e, "last-error log: record failed (diagnostics only)");
        }
    }
}

#[async_trait::async_trait]
impl Delivery for SqsDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.message
    }

    async fn ack(self) -> Result<(), Handback<Self>> {
        let held = self.lease.hold(&self.ctx).await;
        self.delete(held).await
    }

    async fn retry(self, plan: &RetryPlan) -> Result<(), Handback<Self>> {
        let mut held = self.lease.hold(&self.ctx).await;
        self.record_error(plan).await;
        if held.check_lost() {
            held.settle();
            return Ok(());
        }
        let seconds = retry_seconds(plan.delay);
        if self.lease.received_at.elapsed() + Duration::from_secs(seconds) > SQS_MAX_VISIBILITY {
            drop(held);
            let e = Error::new(
                ErrorKind::Config,
                format!(
                    "a retry delay of {seconds} s would end more than 12 h after the receive, beyond what SQS can hide a message for"
                ),
            );
            return Err((e, self));
        }
        let r = self
            .ctx
            .client
            .change_message_visibility()
            .queue_url(&self.ctx.queue_url)
            .receipt_handle(&self.lease.receipt)
            .visibility_timeout(i32::try_from(seconds).unwrap_or(i32::MAX))
            .send()
            .await;
        match r {
            Ok(_) => {
                held.settle();
                Ok(())
            }
            Err(e) if code_of(&e).is_some_and(|(c, m)| is_ownership_lost(c, m)) => {
                held.mark_lost();
                held.settle();
                Ok(())
            }
            Err(e) => {
                drop(held);
                let err = sdk(
                    format!("hiding a message of {} for its retry", self.ctx.queue_name),
                    e,
                );
                Err((err, self))
            }
        }
    }

    async fn park(self, record: &ParkedMessage) -> Result<(), Handback<Self>> {
        let held = self.lease.hold(&self.ctx).await;
        let headers = to_headers(record);
        let encoded = match encode(
            record.message_id,
            &record.routing_key,
            &headers,
            &record.body,
        ) {
            Ok(e) => e,
            Err(e) => {
                drop(held);
                return Err((e, self));
            }
        };
        let (group, dedup) = if self.ctx.fifo {
            let key = headers
                .get(h::AGGREGATE_KEY)
                .cloned()
                .unwrap_or_else(|| record.message_id.to_string());
            (
                Some(group_id(&key)),
                Some(format!(
                    "{}.park.{}",
                    record.message_id, record.redrive_count
                )),
            )
        } else {
            (None, None)
        };
        let sent = send_to_queue(
            &self.ctx.client,
            &self.ctx.dlq_url,
            &[Entry {
                encoded,
                group,
                dedup,
            }],
        )
        .await
        .pop()
        .unwrap_or_else(|| Err(Error::new(ErrorKind::Io, "no result")));
        if let Err(e) = sent {
            drop(held);
            tracing::error!(error = %e, "parking copy not accepted by the DLQ: the source queue keeps the message");
            return Err((e, self));
        }
        failpoint::hit(failpoint::PARK_BEFORE_ACK, &record.consumer).await;
        self.delete(held).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_round_up_to_whole_seconds() {
        assert_eq!(retry_seconds(Duration::from_millis(250)), 1);
        assert_eq!(retry_seconds(Duration::from_secs(5)), 5);
        assert_eq!(retry_seconds(Duration::from_millis(5001)), 6);
        assert_eq!(retry_seconds(Duration::ZERO), 1);
    }
}
