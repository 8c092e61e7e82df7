//! A retry on RabbitMQ: the message waits in a delay stage queue (a queue whose TTL is the
//! stage's delay and whose dead-letter exchange leads back to the work queue) and comes back
//! to the consumer when its time is up. Two ways to get it there, chosen in the topology
//! (`retry_style`):
//!
//! - **ack+publish**: publish a copy with the next attempt's headers to the retry exchange
//!   under the stage's key, wait for the broker's confirm, and only then ack the original. A
//!   crash in between leaves both the copy and the original (the inbox absorbs the second);
//!   a refused or unconfirmed copy leaves the original unacked, so it is delivered again.
//! - **reject+DLX**: reject the original without requeue; the work queue's dead-letter policy
//!   (at least once) moves it to the delay stage. The broker counts the attempts (`x-death`).

use crate::delivery::RabbitDelivery;
use crate::naming::ConsumerNames;
use crate::publisher::Outbound;
use lapin::options::BasicRejectOptions;
use postroom_core::RetryPlan;
use postroom_core::failpoint;
use postroom_core::retry::retry_headers;
use postroom_core::transport::Handback;

/// ack+publish: a confirmed, routed copy in the stage for `plan`, then the original's ack.
pub(crate) async fn publish_then_ack(
    d: RabbitDelivery,
    plan: &RetryPlan,
) -> Result<(), Handback<RabbitDelivery>> {
    let headers = retry_headers(&d.message, plan);
    let key = ConsumerNames::stage_key(plan.stage_delay);
    let sent = d
        .ctx
        .publisher
        .send(Outbound {
            exchange: &d.ctx.names.retry_exchange,
            routing_key: &key,
            id: d.id(),
            headers: &headers,
            body: &d.message.body,
        })
        .await;
    d.ack_after_copy(sent, failpoint::RETRY_BEFORE_ACK, "retry", &key)
        .await
}

/// reject+DLX: a reject without requeue; the work queue's policy dead-letters the message
/// into the delay stage.
pub(crate) async fn reject_into_loop(d: RabbitDelivery) -> Result<(), Handback<RabbitDelivery>> {
    let rejected = d
        .ctx
        .settle_act(
            "reject into the retry loop",
            d.acker.reject(BasicRejectOptions { requeue: false }),
        )
        .await;
    match rejected {
        Ok(()) => {
            d.settled();
            Ok(())
        }
        Err(e) => Err(d.fail(e)),
    }
}
