//! Redrive runs driven from the console: recorded (who, when, which selection) before the
//! first message goes back, executed by the core's [`Redriver`] at the chosen rate through a
//! [`GatedPublisher`] that pauses, resumes and cancels, watched for messages that join the
//! redriven group meanwhile, and audited at every change.

pub mod edit;
pub mod gate;

pub use gate::{Gate, GatedPublisher};

use crate::audit::Auditor;
use crate::backend::ParkingConsole;
use crate::groups::fingerprint;
use crate::metrics as cm;
use chrono::Utc;
use postroom_core::parking::redrive::{RedriveReport, RedriveSkip};
use postroom_core::{
    Error, ErrorKind, MessageId, ParkingFilter, ParkingQuery, ParkingStore, Publisher, RedriveRun,
    Redriver, Result, RunControl, RunState,
};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Fastest rate accepted, in messages per second.
pub const MAX_RATE: f64 = 10_000.0;

/// Most group members looked at when counting messages that joined a group.
const JOIN_SCAN: usize = 100_000;

/// The core's redriver over the console's parking lot, sending through `publisher`, skipping
/// what the consumers' inboxes show applied (when the console reads them) and what is older
/// than the default replay window: the dry run and the run judge every message alike.
pub(crate) fn redriver<P: Publisher + ?Sized>(
    backend: &dyn ParkingConsole,
    publisher: Arc<P>,
) -> Redriver<dyn ParkingStore, P> {
    let redriver = Redriver::new(backend.store(), publisher);
    match backend.inbox() {
        Some(inbox) => redriver.with_inbox(inbox),
        None => redriver,
    }
}

/// What to redrive and how.
#[derive(Clone, Debug, Default)]
pub struct RunPlan {
    /// The selection (never includes redriven copies).
    pub filter: ParkingFilter,
    /// Most messages selected.
    pub limit: usize,
    /// Messages per second.
    pub rate: f64,
    /// The failure group redriven, if the selection is one.
    pub group_key: Option<String>,
    /// Edited bodies by message id (edit-and-redrive).
    pub bodies: HashMap<MessageId, Vec<u8>>,
    /// Extra details for the audit (a diff).
    pub detail: serde_json::Value,
}

/// An operator's act on a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAction {
    /// Stop before the next message, resumable.
    Pause,
    /// Go on after a pause or a failure.
    Resume,
    /// Stop for good.
    Cancel,
}

impl RunAction {
    fn name(self) -> &'static str {
        match self {
            RunAction::Pause => "redrive.pause",
            RunAction::Resume => "redrive.resume",
            RunAction::Cancel => "redrive.cancel",
        }
    }
}

/// A run with its control, as pages show it.
#[derive(Clone, Debug)]
pub struct RunStatus {
    /// The recorded run (selection size and progress).
    pub run: RedriveRun,
    /// How the console drives it (absent for runs started elsewhere, e.g. the CLI).
    pub control: Option<RunControl>,
}

/// The runs this console drives.
pub struct Runs {
    backend: Arc<dyn ParkingConsole>,
    audit: Auditor,
    live: Mutex<HashMap<String, watch::Sender<Gate>>>,
}

impl Runs {
    /// Runs over `backend`.
    pub fn new(backend: Arc<dyn ParkingConsole>, audit: Auditor) -> Self {
        Self {
            backend,
            audit,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// Record a run for `plan` by `actor` and start sending messages back.
    pub async fn start(self: &Arc<Self>, actor: &str, plan: RunPlan) -> Result<RedriveRun> {
        if !(plan.rate.is_finite() && plan.rate > 0.0 && plan.rate <= MAX_RATE) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the rate must be between 0 and {MAX_RATE} messages per second, got {}",
                    plan.rate
                ),
            ));
        }
        let store = self.backend.store();
        let run = store
            .create_redrive_run(&plan.filter, plan.limit, actor)
            .await?;
        let now = Utc::now();
        let control = RunControl {
            run_id: run.id.clone(),
            state: RunState::Running,
            rate: plan.rate,
            group_key: plan.group_key.clone(),
            started_by: actor.to_string(),
            started_at: now,
            updated_at: now,
            joined: 0,
            error: None,
        };
        self.backend.lot().save_run_control(&control).await?;
        self.audit
            .record(
                actor,
                "redrive.start",
                &run.id,
                json!({
                    "selected": run.total,
                    "rate": plan.rate,
                    "group": plan.group_key,
                    "filter": plan.filter,
                    "edit": plan.detail,
                }),
            )
            .await?;
        metrics::counter!(cm::REDRIVE_RUNS, "event" => "started").increment(1);
        self.spawn(control, plan.bodies);
        Ok(run)
    }

    fn spawn(self: &Arc<Self>, control: RunControl, bodies: HashMap<MessageId, Vec<u8>>) {
        let (tx, rx) = watch::channel(Gate::Open);
        self.live
            .lock()
            .expect("runs lock")
            .insert(control.run_id.clone(), tx);
        let this = Arc::clone(self);
        let edited = !bodies.is_empty();
        tokio::spawn(async move {
            let publisher = Arc::new(GatedPublisher::new(this.backend.publisher(), rx, bodies));
            let redriver = redriver(&*this.backend, publisher);
            let mut skipped_so_far = 0;
            let result = redriver
                .execute_report(&control.run_id, control.rate, |p| {
                    if p.skipped == skipped_so_far {
                        metrics::counter!(cm::REDRIVEN).increment(1);
                    }
                    skipped_so_far = p.skipped;
                })
                .await;
            this.finish(control, result, edited).await;
        });
    }

    async fn finish(&self, mut control: RunControl, result: Result<RedriveReport>, edited: bool) {
        let gate = self
            .live
            .lock()
            .expect("runs lock")
            .remove(&control.run_id)
            .map(|tx| *tx.borrow());
        control.state = match (&result, gate) {
            (_, Some(Gate::Cancelled)) => RunState::Cancelled,
            (Ok(_), _) => RunState::Finished,
            // Resuming would send the parked body, not the edited one: edit again instead.
            (Err(_), _) if edited => RunState::Cancelled,
            (Err(_), _) => RunState::Failed,
        };
        control.error = match (&result, gate) {
            (Err(_), Some(Gate::Cancelled)) | (Ok(_), _) => None,
            (Err(e), _) => Some(e.to_string()),
        };
        control.updated_at = Utc::now();
        control.joined = self.joined(&control).await.unwrap_or(control.joined);
        // The audit entry first, the final state second: whoever sees the run ended (a page
        // that reloads once on it, a script polling the state) finds its end in the audit.
        let run = self
            .backend
            .store()
            .redrive_run(&control.run_id)
            .await
            .ok()
            .flatten();
        let skipped: serde_json::Map<String, serde_json::Value> = match &result {
            Ok(report) => RedriveSkip::ALL
                .iter()
                .map(|reason| {
                    let n = report
                        .skipped
                        .iter()
                        .filter(|s| s.reason == *reason)
                        .count();
                    (reason.as_str().to_string(), n.into())
                })
                .collect(),
            Err(_) => serde_json::Map::new(),
        };
        let detail = json!({
            "state": control.state.as_str(),
            "done": run.as_ref().map(|r| r.done),
            "total": run.as_ref().map(|r| r.total),
            "skipped": skipped,
            "joined": control.joined,
            "error": control.error,
        });
        if let Err(e) = self
            .audit
            .record("console", "redrive.end", &control.run_id, detail)
            .await
        {
            tracing::warn!(run_id = %control.run_id, error = %e, "cannot audit the end of a redrive run");
        }
        if let Err(e) = self.backend.lot().save_run_control(&control).await {
            tracing::warn!(run_id = %control.run_id, error = %e, "cannot store the end of a redrive run");
        }
        metrics::counter!(cm::REDRIVE_RUNS, "event" => control.state.as_str()).increment(1);
    }

    /// Messages of the run's group parked after the run started (`0` for runs that redrive
    /// no group).
    pub async fn joined(&self, control: &RunControl) -> Result<u64> {
        let Some(key) = &control.group_key else {
            return Ok(0);
        };
        let q = ParkingQuery {
            filter: ParkingFilter {
                since: Some(control.started_at),
                ..ParkingFilter::default()
            },
            ..ParkingQuery::default()
        };
        let rows = self.backend.lot().parked_summaries(&q, JOIN_SCAN).await?;
        Ok(rows.iter().filter(|s| &fingerprint(s) == key).count() as u64)
    }

    /// Pause, resume or cancel run `run_id` for `actor`.
    pub async fn act(
        self: &Arc<Self>,
        actor: &str,
        run_id: &str,
        action: RunAction,
    ) -> Result<RunControl> {
        let mut control = self
            .backend
            .lot()
            .run_control(run_id)
            .await?
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("run {run_id} was not started from the console"),
                )
            })?;
        if control.state.is_final() {
            return Err(Error::new(
                ErrorKind::Config,
                format!("run {run_id} is {}", control.state.as_str()),
            ));
        }
        let live = self.live.lock().expect("runs lock").get(run_id).cloned();
        let from = control.state;
        control.state = match (action, &live) {
            (RunAction::Pause, Some(tx)) => {
                tx.send_replace(Gate::Paused);
                RunState::Paused
            }
            (RunAction::Pause, None) => RunState::Paused,
            (RunAction::Resume, Some(tx)) => {
                tx.send_replace(Gate::Open);
                RunState::Running
            }
            (RunAction::Resume, None) => RunState::Running,
            (RunAction::Cancel, Some(tx)) => {
                tx.send_replace(Gate::Cancelled);
                RunState::Cancelled
            }
            (RunAction::Cancel, None) => RunState::Cancelled,
        };
        control.updated_at = Utc::now();
        control.error = None;
        self.backend.lot().save_run_control(&control).await?;
        self.audit
            .record(
                actor,
                action.name(),
                run_id,
                json!({"from": from.as_str(), "to": control.state.as_str()}),
            )
            .await?;
        if action == RunAction::Resume && live.is_none() {
            // A run interrupted by a failure or a restart: go on with what is still pending.
            self.spawn(control.clone(), HashMap::new());
        }
        Ok(control)
    }

    /// A run and its control, with the count of messages that joined its group so far.
    pub async fn status(&self, run_id: &str) -> Result<Option<RunStatus>> {
        let Some(run) = self.backend.store().redrive_run(run_id).await? else {
            return Ok(None);
        };
        let mut control = self.backend.lot().run_control(run_id).await?;
        if let Some(c) = control.as_mut()
            && !c.state.is_final()
        {
            c.joined = self.joined(c).await?;
        }
        Ok(Some(RunStatus { run, control }))
    }
}
