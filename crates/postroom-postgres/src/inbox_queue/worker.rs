//! One inbox-queue worker: claim, decide (ordered mode: apply, duplicate or gap), handle,
//! settle. The retry budget and the parking record are core's, as in the consumer loop.

use super::InboxQueue;
use super::claim::Claimed;
use postroom_core::consumer::{parked_record, retry_headers};
use postroom_core::ordering::{VersionDecision, check_version};
use postroom_core::retry::Attempt;
use postroom_core::{
    Disposition, ErrorClass, Handled, Handler, HandlerError, Incoming, ParkReason, Result,
};
use std::sync::Arc;
use tokio::sync::watch;

pub(super) struct Worker<H: ?Sized> {
    queue: InboxQueue,
    handler: Arc<H>,
    id: String,
}

impl<H: Handler + ?Sized> Worker<H> {
    pub(super) fn new(queue: InboxQueue, handler: Arc<H>, id: String) -> Self {
        Self { queue, handler, id }
    }

    pub(super) async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let idle = self.queue.config.poll_interval;
        while !*shutdown.borrow() {
            let rows = match self.queue.claim(&self.id).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(worker = %self.id, error = %e, "inbox queue: claim failed");
                    Vec::new()
                }
            };
            if rows.is_empty() {
                tokio::select! {
                    _ = tokio::time::sleep(idle) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            for row in rows {
                if let Err(e) = self.process(&row).await {
                    tracing::warn!(worker = %self.id, error = %e, "inbox queue: settle failed; the lease will expire and the row comes back");
                }
            }
        }
    }

    async fn process(&self, row: &Claimed) -> Result<()> {
        let cfg = &self.queue.config.consumer;
        let envelope = match cfg.decoder.decode(&row.message.body) {
            Ok(e) => e,
            Err(e) => {
                let reason = ParkReason {
                    error_class: ErrorClass::Permanent,
                    error_code: e.code().into(),
                    error_message: e.to_string(),
                };
                return self.park(row, None, reason).await;
            }
        };
        if let (Some(mode), Some((key, seq))) = (&self.queue.config.ordered, &row.order) {
            match check_version(row.last_seq, *seq, 1) {
                VersionDecision::Apply => {}
                VersionDecision::AlreadyApplied => {
                    self.queue.mark_done(&self.id, row).await?;
                    return Ok(());
                }
                gap @ VersionDecision::Gap { .. } => {
                    let waited = row.gap_for.unwrap_or_default();
                    if waited < mode.gap_wait {
                        self.queue.defer(&self.id, row, mode.recheck, None).await?;
                        return Ok(());
                    }
                    let err = gap
                        .gap_error(key)
                        .unwrap_or_else(|| HandlerError::transient("version_gap", "gap"));
                    metrics::counter!("postroom_inbox_queue_gap_parked_total", "consumer" => cfg.name.clone()).increment(1);
                    tracing::error!(consumer = %cfg.name, key = %key, seq, waited_ms = waited.as_millis() as u64,
                        "ALERT: sequence gap never filled; parking the waiting message");
                    let reason = ParkReason {
                        error_class: err.class,
                        error_code: err.code,
                        error_message: format!("{} (waited {:?})", err.message, waited),
                    };
                    return self.park(row, Some(&envelope), reason).await;
                }
            }
        }
        let incoming = Incoming {
            envelope,
            attempt: row.attempts,
            redelivered: row.message.redelivered,
            routing_key: row.message.routing_key.clone(),
            headers: row.message.headers.clone(),
        };
        let result =
            match tokio::time::timeout(cfg.handler_timeout, self.handler.handle(&incoming)).await {
                Ok(r) => r,
                Err(_) => Err(HandlerError::transient(
                    "handler_timeout",
                    format!("handler took over {:?}", cfg.handler_timeout),
                )),
            };
        let err = match result {
            Ok(Handled::Applied | Handled::Duplicate | Handled::BusinessOutcome(_)) => {
                self.queue.mark_done(&self.id, row).await?;
                return Ok(());
            }
            Err(err) => err,
        };
        let attempt = Attempt {
            attempt: row.attempts,
            occurred_at: Some(incoming.envelope.occurred_at),
            now: chrono::Utc::now(),
            class: err.class,
            code: &err.code,
            message: &err.message,
        };
        match cfg.retry.decide(&attempt, rand::random()) {
            Disposition::Ack => {
                self.queue.mark_done(&self.id, row).await?;
            }
            Disposition::Retry(plan) => {
                let headers = retry_headers(&row.message, &plan);
                let text = format!(
                    "{} {}: {}",
                    plan.error_class, plan.error_code, plan.error_message
                );
                self.queue
                    .defer(
                        &self.id,
                        row,
                        plan.delay,
                        Some((plan.attempt, &headers, &text)),
                    )
                    .await?;
                metrics::counter!("postroom_inbox_queue_retried_total", "consumer" => cfg.name.clone()).increment(1);
            }
            Disposition::Park(reason) => {
                self.park(row, Some(&incoming.envelope), reason).await?;
            }
        }
        Ok(())
    }

    async fn park(
        &self,
        row: &Claimed,
        envelope: Option<&postroom_core::Envelope>,
        reason: ParkReason,
    ) -> Result<()> {
        let cfg = &self.queue.config.consumer;
        let record = parked_record(cfg, &row.message, envelope, &reason);
        if self.queue.park(&self.id, row, &record).await? {
            metrics::counter!("postroom_inbox_queue_parked_total", "consumer" => cfg.name.clone(), "code" => reason.error_code.clone())
                .increment(1);
            tracing::warn!(consumer = %cfg.name, code = %reason.error_code, "inbox queue: message parked");
        }
        Ok(())
    }
}
