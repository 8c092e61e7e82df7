//! Redrive (R12): an operator's selection of parked messages sent back to the consumer that
//! parked them, with the same id, at a bounded rate, each id recorded so an interrupted run
//! resumes where it stopped. There is never an automatic parking → main loop.

use crate::error::{Error, ErrorKind, Result};
use crate::message::{Headers, OutgoingMessage, Route, headers as h};
use crate::parking::{ParkedMessage, ParkingFilter, ParkingStore, RedriveRun};
use crate::transport::Publisher;
use std::sync::Arc;
use std::time::Duration;

/// Progress of a run, reported after each message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedriveProgress {
    /// Messages sent back so far (including earlier, interrupted passes).
    pub done: u64,
    /// Messages selected.
    pub total: u64,
}

/// Sends parked messages back.
pub struct Redriver<S: ?Sized, P: ?Sized> {
    store: Arc<S>,
    publisher: Arc<P>,
}

impl<S: ParkingStore + ?Sized, P: Publisher + ?Sized> Redriver<S, P> {
    /// A redriver over `store`, publishing with `publisher`.
    pub fn new(store: Arc<S>, publisher: Arc<P>) -> Self {
        Self { store, publisher }
    }

    /// Dry run: what `filter` selects, without changing anything.
    pub async fn preview(
        &self,
        filter: &ParkingFilter,
        limit: usize,
    ) -> Result<Vec<ParkedMessage>> {
        let mut f = filter.clone();
        f.include_redriven = false;
        self.store.search(&f, limit).await
    }

    /// Record a run selecting at most `limit` parked messages.
    pub async fn start(
        &self,
        filter: &ParkingFilter,
        limit: usize,
        operator: &str,
    ) -> Result<RedriveRun> {
        self.store.create_redrive_run(filter, limit, operator).await
    }

    /// Send the run's pending messages back at no more than `rate_per_sec`, reporting progress.
    /// Safe to call again after an interruption: it continues with what is still pending.
    pub async fn execute(
        &self,
        run_id: &str,
        rate_per_sec: f64,
        mut progress: impl FnMut(RedriveProgress) + Send,
    ) -> Result<RedriveRun> {
        if !(rate_per_sec.is_finite() && rate_per_sec > 0.0) {
            return Err(Error::new(
                ErrorKind::Config,
                format!("redrive rate must be a positive number, got {rate_per_sec}"),
            ));
        }
        let run =
            self.store.redrive_run(run_id).await?.ok_or_else(|| {
                Error::new(ErrorKind::NotFound, format!("no redrive run {run_id}"))
            })?;
        let mut done = run.done;
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate_per_sec));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let batch = self.store.redrive_pending(run_id, 100).await?;
            if batch.is_empty() {
                break;
            }
            for parked in batch {
                tick.tick().await;
                self.publisher.publish(&redrive_message(&parked)).await?;
                self.store
                    .mark_redriven(run_id, &parked.consumer, parked.message_id)
                    .await?;
                done += 1;
                progress(RedriveProgress {
                    done,
                    total: run.total,
                });
            }
        }
        Ok(self
            .store
            .redrive_run(run_id)
            .await?
            .unwrap_or(RedriveRun { done, ..run }))
    }
}

/// The message a redrive publishes: same id and body, to the consumer that parked it, with a
/// fresh retry budget and the redrive counted.
#[must_use]
pub fn redrive_message(parked: &ParkedMessage) -> OutgoingMessage {
    let mut headers: Headers = parked.headers.clone();
    for k in [
        h::RETRY_ATTEMPT,
        h::FIRST_FAILURE_AT,
        h::LAST_ERROR_CLASS,
        h::LAST_ERROR_CODE,
        h::LAST_ERROR,
        h::PARKED_BY,
        h::PARKED_BY_VERSION,
    ] {
        headers.remove(k);
    }
    headers.insert(
        h::REDRIVE_COUNT.into(),
        (parked.redrive_count + 1).to_string(),
    );
    headers.insert(h::ORIGINAL_ROUTE.into(), parked.routing_key.clone());
    OutgoingMessage {
        id: parked.message_id,
        route: Route::Consumer(parked.consumer.clone()),
        headers,
        body: parked.body.clone(),
    }
}
