//! One inbox-queue worker: claim, decide (ordered mode: apply, duplicate or gap), handle,
//! settle. The retry budget and the parking record are core's, as in the consumer loop.

use super::InboxQueue;
use super::claim::Claimed;
use postroom_core::consumer::breaker::Admission;
use postroom_core::consumer::{Screened, Step};
use postroom_core::metrics as m;
use postroom_core::ordering::{VersionDecision, check_version, gap_error};
use postroom_core::retry::retry_headers;
use postroom_core::{Disposition, Envelope, Handler, ParkReason, Result};
use tokio::sync::watch;

pub(super) struct Worker<H: ?Sized> {
    queue: InboxQueue,
    step: Step<H>,
    id: String,
}

impl<H: Handler + ?Sized> Worker<H> {
    pub(super) fn new(queue: InboxQueue, step: Step<H>, id: String) -> Self {
        Self { queue, step, id }
    }

    pub(super) async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let idle = self.queue.config.poll_interval;
        // A dropped sender counts as a shutdown, so a lost handle never spins this loop.
        while !*shutdown.borrow() && shutdown.has_changed().is_ok() {
            if let Admission::Wait(pause) = self.step.breaker().admit() {
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            let rows = match self.queue.claim(&self.id).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(worker = %self.id, error = %e, "inbox queue: claim failed");
                    Vec::new()
                }
            };
            self.step.breaker().pulled(!rows.is_empty());
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

    /// The consumer loop's decision step (screening, handler under its timeout, retry
    /// budget), with ordered mode's gap handling before the handler. A row settled without
    /// handling (parked at screening, already applied, deferred behind a gap) drops its
    /// breaker verdict, which records it as neutral: a trial claim of only such rows ends
    /// without a verdict, and the next claim is a new trial.
    async fn process(&self, row: &Claimed) -> Result<()> {
        let cfg = self.step.config();
        let (envelope, verdict) = match self.step.screen(&row.message) {
            Screened::Park { reason, envelope } => {
                return self.park(row, envelope.as_ref(), reason).await;
            }
            Screened::Handle { envelope, verdict } => (envelope, verdict),
        };
        if let (Some(mode), Some((key, seq))) = (&self.queue.config.ordered, &row.order) {
            match check_version(row.last_seq, *seq, 1) {
                VersionDecision::Apply => {}
                VersionDecision::AlreadyApplied => {
                    self.queue.mark_done(&self.id, row).await?;
                    return Ok(());
                }
                VersionDecision::Gap {
                    missing_from,
                    missing_to,
                } => {
                    let waited = row.gap_for.unwrap_or_default();
                    if waited < mode.gap_wait {
                        self.queue.defer(&self.id, row, mode.recheck, None).await?;
                        return Ok(());
                    }
                    let err = gap_error(key, missing_from, missing_to);
                    metrics::counter!(m::INBOX_QUEUE_GAP_PARKED, "consumer" => cfg.name.clone())
                        .increment(1);
                    let reason = ParkReason {
                        error_class: err.class,
                        error_code: err.code,
                        error_message: format!("{} (waited {:?})", err.message, waited),
                    };
                    return self.park(row, Some(&envelope), reason).await;
                }
            }
        }
        match self
            .step
            .handle(&row.message, &envelope, row.attempts, verdict)
            .await
        {
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
                metrics::counter!(m::INBOX_QUEUE_RETRIED, "consumer" => cfg.name.clone())
                    .increment(1);
            }
            Disposition::Park(reason) => {
                self.park(row, Some(&envelope), reason).await?;
            }
        }
        Ok(())
    }

    async fn park(
        &self,
        row: &Claimed,
        envelope: Option<&Envelope>,
        reason: ParkReason,
    ) -> Result<()> {
        let cfg = self.step.config();
        let record = postroom_core::consumer::parked_record(cfg, &row.message, envelope, &reason);
        if self.queue.park(&self.id, row, &record).await? {
            metrics::counter!(m::INBOX_QUEUE_PARKED, "consumer" => cfg.name.clone(), "code" => reason.error_code.clone())
                .increment(1);
            postroom_core::consumer::log_parked(&cfg.name, &record, &reason);
        }
        Ok(())
    }
}
