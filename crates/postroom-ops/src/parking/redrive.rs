//! Redrive as an operator runs it: preview a selection, record a run (or pick up an
//! interrupted one), send its messages back at a bounded rate with progress, through the
//! store's own queue or a broker.
//!
//! Every message is checked against its consumer's inbox in the same store first: one that
//! consumer already applied is skipped (its commit went through though its outcome looked
//! unknown when it was parked), and one older than the inbox's replay window is refused unless
//! forced, since its inbox row may be purged and a repeat could no longer be recognised.

use crate::error::{OpsError, OpsResult};
use crate::limits::check_rate;
use postroom::Stack;
use postroom_core::inbox::DEFAULT_REPLAY_WINDOW;
use postroom_core::parking::redrive::{RedriveProgress, RedriveReport, RedriveSkip};
use postroom_core::{ParkedMessage, ParkingFilter, ParkingStore, Publisher, RedriveRun, Redriver};
use std::sync::Arc;
use std::time::Duration;

/// How a redrive guards against applying a message twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedriveGuard {
    /// Send back messages older than the replay window too (checked by hand first).
    pub force: bool,
    /// How long the consumers' inboxes keep an id.
    pub replay_window: Duration,
}

impl Default for RedriveGuard {
    fn default() -> Self {
        Self {
            force: false,
            replay_window: DEFAULT_REPLAY_WINDOW,
        }
    }
}

/// A parking store and the publisher that sends its messages back.
pub struct Redrive {
    store: Arc<dyn ParkingStore>,
    redriver: Redriver<dyn ParkingStore, dyn Publisher>,
}

impl Redrive {
    /// Over the parking lot of `stack`'s store, sending through its transport (a broker, or
    /// the store's own queue); each message checked against its consumer's inbox in the store
    /// as `guard` says.
    pub fn open(stack: &Stack, guard: RedriveGuard) -> OpsResult<Self> {
        let store = crate::store_of(stack)?;
        let transport = stack.transport();
        let parking = store.parking();
        let mut redriver = Redriver::new(parking.clone(), transport.publisher())
            .replay_window(guard.replay_window)
            .force(guard.force);
        if let Some(inbox) = store.inbox() {
            redriver = redriver.with_inbox(inbox);
        }
        Ok(Self {
            redriver,
            store: parking,
        })
    }

    /// What `filter` selects (at most `limit`) and why a run started now would skip each
    /// message it would not send back, changing nothing.
    pub async fn preview(
        &self,
        filter: &ParkingFilter,
        limit: usize,
    ) -> OpsResult<Vec<(ParkedMessage, Option<RedriveSkip>)>> {
        Ok(self.redriver.preview_outcomes(filter, limit).await?)
    }

    /// Record a run of what `filter` selects, asked for by `operator`.
    pub async fn start(
        &self,
        filter: &ParkingFilter,
        limit: usize,
        operator: &str,
    ) -> OpsResult<RedriveRun> {
        Ok(self.redriver.start(filter, limit, operator).await?)
    }

    /// An interrupted run, to continue.
    pub async fn resume(&self, run_id: &str) -> OpsResult<RedriveRun> {
        self.store
            .redrive_run(run_id)
            .await?
            .ok_or_else(|| OpsError::usage(format!("no redrive run {run_id}")))
    }

    /// Send the run's pending messages back at `rate` per second, reporting progress; the
    /// report names the messages skipped in this pass and why.
    pub async fn execute(
        &self,
        run: &RedriveRun,
        rate: f64,
        progress: impl FnMut(RedriveProgress) + Send,
    ) -> OpsResult<RedriveReport> {
        let rate = check_rate(rate)?;
        self.redriver
            .execute_report(&run.id, rate, progress)
            .await
            .map_err(|e| {
                let stopped = OpsError::from(e);
                OpsError::new(
                    stopped.kind,
                    format!("redrive run {} stopped: {}", run.id, stopped.message),
                )
            })
    }
}
