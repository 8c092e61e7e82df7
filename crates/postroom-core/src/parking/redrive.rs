//! Redrive: an operator's selection of parked messages sent back to the consumer that
//! parked them, with the same id, at a bounded rate, each id recorded so an interrupted run
//! resumes where it stopped. There is never an automatic parking → main loop.
//!
//! Before a message goes back, redrive asks the inbox of the consumer it targets (when given
//! one, [`Redriver::with_inbox`]): a message that consumer already applied (its commit
//! succeeded though its outcome looked unknown, and it was parked later) is skipped and
//! reported, not applied twice. A message older than the inbox's replay window (its inbox row
//! may have been purged, so the inbox cannot vouch for it) is refused unless forced.

use crate::envelope::MessageId;
use crate::error::{Error, ErrorKind, Result};
use crate::inbox::{DEFAULT_REPLAY_WINDOW, InboxLookup};
use crate::message::{Headers, OutgoingMessage, Route, headers as h};
use crate::parking::{ParkedMessage, ParkingFilter, ParkingStore, RedriveRun};
use crate::transport::Publisher;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

/// Progress of a run, reported after each message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedriveProgress {
    /// Messages finished so far, sent back or skipped (including earlier, interrupted passes).
    pub done: u64,
    /// Messages selected.
    pub total: u64,
    /// Messages of this pass not sent back (see [`RedriveSkip`]).
    pub skipped: u64,
}

/// Why a selected message was not sent back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedriveSkip {
    /// The target consumer's inbox holds the id: its effect is already applied.
    AlreadyApplied,
    /// Older than the replay window: its inbox row may have been purged, so a repeat could
    /// not be recognised. Redrive it with `force` after checking by hand.
    OlderThanReplayWindow,
}

impl RedriveSkip {
    /// Every reason, in the order reports list them.
    pub const ALL: [RedriveSkip; 2] = [
        RedriveSkip::AlreadyApplied,
        RedriveSkip::OlderThanReplayWindow,
    ];

    /// Stable name (the outcome recorded with the run's item).
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            RedriveSkip::AlreadyApplied => "already_applied",
            RedriveSkip::OlderThanReplayWindow => "older_than_replay_window",
        }
    }

    /// The reason in words, for an operator.
    #[must_use]
    pub fn in_words(&self) -> &'static str {
        match self {
            RedriveSkip::AlreadyApplied => "already applied (its consumer's inbox holds the id)",
            RedriveSkip::OlderThanReplayWindow => {
                "older than the replay window (its inbox row may be purged: check by hand that its effect was not applied)"
            }
        }
    }
}

/// A selected message that was not sent back.
#[derive(Clone, Debug, PartialEq)]
pub struct SkippedMessage {
    /// The parked record.
    pub message: ParkedMessage,
    /// Why.
    pub reason: RedriveSkip,
}

/// What a run did in this pass.
#[derive(Clone, Debug, PartialEq)]
pub struct RedriveReport {
    /// The run as recorded after this pass.
    pub run: RedriveRun,
    /// The messages skipped in this pass, with the reason.
    pub skipped: Vec<SkippedMessage>,
}

/// Sends parked messages back.
pub struct Redriver<S: ?Sized, P: ?Sized> {
    store: Arc<S>,
    publisher: Arc<P>,
    inbox: Option<Arc<dyn InboxLookup>>,
    replay_window: Duration,
    force: bool,
}

/// When `m` came into being: the time in its UUIDv7 id, else its first failure.
#[must_use]
pub fn born_at(m: &ParkedMessage) -> DateTime<Utc> {
    m.message_id
        .as_uuid()
        .get_timestamp()
        .filter(|_| m.message_id.as_uuid().get_version_num() == 7)
        .and_then(|t| {
            let (secs, nanos) = t.to_unix();
            DateTime::from_timestamp(i64::try_from(secs).ok()?, nanos)
        })
        .unwrap_or(m.first_failure_at)
}

impl<S: ParkingStore + ?Sized, P: Publisher + ?Sized> Redriver<S, P> {
    /// A redriver over `store`, publishing with `publisher`, refusing messages older than
    /// [`DEFAULT_REPLAY_WINDOW`]; give it the targets' inbox with [`Redriver::with_inbox`].
    pub fn new(store: Arc<S>, publisher: Arc<P>) -> Self {
        Self {
            store,
            publisher,
            inbox: None,
            replay_window: DEFAULT_REPLAY_WINDOW,
            force: false,
        }
    }

    /// Skip (and report) messages the target consumer's inbox already holds.
    #[must_use]
    pub fn with_inbox(mut self, inbox: Arc<dyn InboxLookup>) -> Self {
        self.inbox = Some(inbox);
        self
    }

    /// The inbox's replay window (how long its rows are kept before they are purged).
    #[must_use]
    pub fn replay_window(mut self, window: Duration) -> Self {
        self.replay_window = window;
        self
    }

    /// Send back messages older than the replay window too.
    #[must_use]
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Dry run: what `filter` selects, without changing anything.
    pub async fn preview(
        &self,
        filter: &ParkingFilter,
        limit: usize,
    ) -> Result<Vec<ParkedMessage>> {
        self.store.search(&filter.for_redrive(), limit).await
    }

    /// Dry run with outcomes: what `filter` selects (at most `limit`) and, for each message,
    /// why a run started now would skip it (`None`: it would go back). Changes nothing.
    pub async fn preview_outcomes(
        &self,
        filter: &ParkingFilter,
        limit: usize,
    ) -> Result<Vec<(ParkedMessage, Option<RedriveSkip>)>> {
        let selected = self.preview(filter, limit).await?;
        // One look at the inboxes for the whole selection, not one per message.
        let applied = match &self.inbox {
            Some(inbox) => {
                let items: Vec<(&str, MessageId)> = selected
                    .iter()
                    .map(|m| (m.consumer.as_str(), m.message_id))
                    .collect();
                let held = inbox.contains_each(&items).await?;
                if held.len() != items.len() {
                    return Err(Error::new(
                        ErrorKind::InvalidData,
                        format!(
                            "the inbox answered {} of {} lookups",
                            held.len(),
                            items.len()
                        ),
                    ));
                }
                held
            }
            None => vec![false; selected.len()],
        };
        Ok(selected
            .into_iter()
            .zip(applied)
            .map(|(m, applied)| {
                let skip = self.skip_reason_given(&m, applied);
                (m, skip)
            })
            .collect())
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

    /// Why `m` must not go back now, if it must not.
    async fn skip_reason(&self, m: &ParkedMessage) -> Result<Option<RedriveSkip>> {
        let applied = match &self.inbox {
            Some(inbox) => inbox.contains(&m.consumer, m.message_id).await?,
            None => false,
        };
        Ok(self.skip_reason_given(m, applied))
    }

    /// Why `m` must not go back now, `applied` being whether its consumer's inbox holds it.
    fn skip_reason_given(&self, m: &ParkedMessage, applied: bool) -> Option<RedriveSkip> {
        if applied {
            return Some(RedriveSkip::AlreadyApplied);
        }
        let window =
            chrono::TimeDelta::from_std(self.replay_window).unwrap_or(chrono::TimeDelta::MAX);
        let too_old = Utc::now()
            .checked_sub_signed(window)
            .is_some_and(|oldest| born_at(m) < oldest);
        (too_old && !self.force).then_some(RedriveSkip::OlderThanReplayWindow)
    }

    /// Send the run's pending messages back at no more than `rate_per_sec`, reporting progress.
    /// Safe to call again after an interruption: it continues with what is still pending.
    pub async fn execute(
        &self,
        run_id: &str,
        rate_per_sec: f64,
        progress: impl FnMut(RedriveProgress) + Send,
    ) -> Result<RedriveRun> {
        Ok(self
            .execute_report(run_id, rate_per_sec, progress)
            .await?
            .run)
    }

    /// [`execute`](Self::execute), returning what was skipped too.
    pub async fn execute_report(
        &self,
        run_id: &str,
        rate_per_sec: f64,
        mut progress: impl FnMut(RedriveProgress) + Send,
    ) -> Result<RedriveReport> {
        if !(rate_per_sec.is_finite() && rate_per_sec > 0.0) {
            return Err(Error::new(
                ErrorKind::Config,
                format!("redrive rate must be a positive number, got {rate_per_sec}"),
            ));
        }
        // One message a year is the slowest pace kept; a slower one is a mistake, not a rate.
        let period = Duration::try_from_secs_f64(1.0 / rate_per_sec)
            .ok()
            .filter(|p| *p <= Duration::from_secs(365 * 24 * 3600))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Config,
                    format!(
                        "redrive rate {rate_per_sec} per second is slower than one message a year"
                    ),
                )
            })?;
        let run =
            self.store.redrive_run(run_id).await?.ok_or_else(|| {
                Error::new(ErrorKind::NotFound, format!("no redrive run {run_id}"))
            })?;
        let mut done = run.done;
        let mut skipped = Vec::new();
        let mut tick = tokio::time::interval(period.max(Duration::from_nanos(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let batch = self.store.redrive_pending(run_id, 100).await?;
            if batch.is_empty() {
                break;
            }
            for parked in batch {
                if let Some(reason) = self.skip_reason(&parked).await? {
                    tracing::warn!(run_id, consumer = %parked.consumer, message_id = %parked.message_id,
                        reason = reason.as_str(), "not redriven");
                    self.store
                        .mark_redrive_skipped(run_id, &parked, reason.as_str())
                        .await?;
                    skipped.push(SkippedMessage {
                        message: parked,
                        reason,
                    });
                } else {
                    tick.tick().await;
                    self.publisher.publish(&redrive_message(&parked)).await?;
                    // Conditional on the record read: a copy consumed and parked again since
                    // the confirm keeps its new parking visible.
                    if !self.store.mark_redriven(run_id, &parked).await? {
                        tracing::warn!(run_id, consumer = %parked.consumer, message_id = %parked.message_id,
                            "the redriven copy was parked again before the redrive was recorded: its new parking stays visible");
                    }
                }
                done += 1;
                progress(RedriveProgress {
                    done,
                    total: run.total,
                    skipped: skipped.len() as u64,
                });
            }
        }
        let run = self
            .store
            .redrive_run(run_id)
            .await?
            .unwrap_or(RedriveRun { done, ..run });
        Ok(RedriveReport { run, skipped })
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
