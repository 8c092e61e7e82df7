//! Settling one delivery as decided: ack only after the handler returned (its transaction
//! committed); retry through the transport's delay; park with every diagnostic. A failed act
//! leaves the message with the transport, which delivers it again (the inbox absorbs a repeat).

use super::record::parked_record;
use super::step::{Decision, Step};
use crate::error::{Error, ErrorKind};
use crate::failpoint;
use crate::handler::Handler;
use crate::metrics as m;
use crate::outcome::Disposition;
use crate::outcome::codes::Code;
use crate::transport::{Delivery, ReceivedMessage};
use std::time::Duration;

impl<H: ?Sized> Step<H> {
    /// Settle `delivery` (whose message is `msg`) as `decision` says.
    pub async fn settle<D: Delivery>(
        &self,
        delivery: D,
        msg: &ReceivedMessage,
        decision: Decision,
    ) {
        let name = self.config.name.clone();
        match decision.disposition {
            Disposition::Ack => {
                failpoint::hit(failpoint::CONSUMER_BEFORE_ACK, &name).await;
                self.ack_with_retries(delivery).await;
            }
            Disposition::Retry(plan) => match delivery.retry(&plan).await {
                Ok(()) => {
                    metrics::counter!(m::RETRIED, "consumer" => name, "stage" => plan.stage.to_string()).increment(1);
                    self.stats.record_retry(plan.stage);
                    tracing::info!(attempt = plan.attempt, stage = plan.stage, delay_ms = plan.delay.as_millis() as u64, error = %plan.error_message, "retry scheduled");
                }
                // A shutdown closing the link under a retry: nothing is lost.
                Err((e, _back)) => self.settle_failed(
                    name,
                    "retry",
                    &e,
                    "retry not made, the link was closed: the transport delivers the original again",
                    "retry failed: original not acked, the transport delivers it again",
                ),
            },
            Disposition::Park(reason) => {
                let record = parked_record(&self.config, msg, decision.envelope.as_ref(), &reason);
                match delivery.park(&record).await {
                    Ok(()) => {
                        if reason.postroom_code() == Some(Code::CrashLoop) {
                            metrics::counter!(m::CRASH_LOOPS, "consumer" => name.clone())
                                .increment(1);
                        }
                        metrics::counter!(m::PARKED, "consumer" => name, "code" => reason.error_code.clone()).increment(1);
                        self.stats.record_parked(&reason.error_code);
                        super::log_parked(&self.config.name, &record, &reason);
                    }
                    Err((e, _back)) => self.settle_failed(
                        name,
                        "park",
                        &e,
                        "not parked, the link was closed: the source keeps the message",
                        "dead-lettering failed: the source keeps the message",
                    ),
                }
            }
        }
    }

    /// Acknowledge every delivery of `acks` (their effects committed) in as few acts as the
    /// transport allows ([`Delivery::ack_all`]); one that failed is tried again on its own.
    pub async fn settle_acks<D: Delivery>(&self, acks: Vec<D>) {
        if acks.is_empty() {
            return;
        }
        for _ in 0..acks.len() {
            failpoint::hit(failpoint::CONSUMER_BEFORE_ACK, &self.config.name).await;
        }
        let failed = D::ack_all(acks).await.into_iter().filter_map(Result::err);
        futures::future::join_all(failed.map(|(e, back)| async move {
            metrics::counter!(m::SETTLE_FAILED, "consumer" => self.config.name.clone(), "act" => "ack").increment(1);
            tracing::warn!(error = %e, "ack failed");
            if e.kind() == ErrorKind::Closed {
                self.gave_up_ack(true);
            } else {
                self.ack_with_retries(back).await;
            }
        }))
        .await;
    }

    /// Acknowledge `delivery`, trying again twice after a failure unless the link is gone.
    async fn ack_with_retries<D: Delivery>(&self, delivery: D) {
        let name = &self.config.name;
        let mut delivery = delivery;
        let mut closed = false;
        for try_no in 0..3 {
            match delivery.ack().await {
                Ok(()) => return,
                Err((e, back)) => {
                    metrics::counter!(m::SETTLE_FAILED, "consumer" => name.clone(), "act" => "ack")
                        .increment(1);
                    tracing::warn!(error = %e, try_no, "ack failed");
                    delivery = back;
                    closed = e.kind() == ErrorKind::Closed;
                    if closed {
                        break; // the link is gone: trying again cannot help
                    }
                    tokio::time::sleep(Duration::from_millis(50 << try_no)).await;
                }
            }
        }
        self.gave_up_ack(closed);
    }

    /// Count and log a failed settling act `act` of consumer `name`: a warning saying
    /// `when_closed` if the link was closed, else an error saying `otherwise`.
    fn settle_failed(
        &self,
        name: String,
        act: &'static str,
        e: &Error,
        when_closed: &str,
        otherwise: &str,
    ) {
        metrics::counter!(m::SETTLE_FAILED, "consumer" => name, "act" => act).increment(1);
        self.stats.record_settle_failure();
        if e.kind() == ErrorKind::Closed {
            tracing::warn!(error = %e, "{when_closed}");
        } else {
            tracing::error!(error = %e, "{otherwise}");
        }
    }

    fn gave_up_ack(&self, closed: bool) {
        self.stats.record_settle_failure();
        if closed {
            tracing::warn!(
                "the delivery's channel or link was closed before its ack (a shutdown?): the transport delivers it again (the inbox absorbs it)"
            );
        } else {
            tracing::error!(
                "ack kept failing: leaving the delivery to the transport, which delivers it again (the inbox absorbs it)"
            );
        }
    }
}

impl<H: Handler + ?Sized> Step<H> {
    /// Decide and settle one delivery, in a tracing span with its ids.
    pub async fn process<D: Delivery>(&self, delivery: D) {
        use tracing::Instrument;
        let msg = delivery.message().clone();
        let span = tracing::info_span!(
            "postroom.handle",
            consumer = %self.config.name,
            message_id = %msg.stable_id(),
            correlation_id = msg.headers.get(crate::message::headers::CORRELATION_ID).map(String::as_str).unwrap_or(""),
            attempt = msg.attempt(),
            redelivered = msg.redelivered,
        );
        async move {
            let decision = self.decide(&msg).await;
            self.settle(delivery, &msg, decision).await;
        }
        .instrument(span)
        .await;
    }
}
