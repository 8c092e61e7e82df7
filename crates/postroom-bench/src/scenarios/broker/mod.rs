//! The relay and consumer scenarios measured the same way on every broker: postroom's side
//! is written once against the [`Transport`](postroom_core::Transport) trait, and each broker's file adds only what is
//! its own (the workload on the shared server and its raw client's baseline).

pub mod consumer;
pub mod raw_inbox;
pub mod relay;

use crate::report::{Load, Measurement, Target};
pub use crate::resources::BrokerWorkload;
use crate::{BenchError, Ctx, PG_FSYNC_NOTE};

/// How a scenario is named in the report, and what its baseline is.
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    /// The measurement's stable name, e.g. `relay_pg_to_kafka`.
    pub name: &'static str,
    /// The `--scenario` group it is reported under.
    pub group: &'static str,
    /// What the raw baseline does.
    pub baseline: &'static str,
    /// A workload of its own for every round (instead of one for the whole scenario), where
    /// what a round leaves behind could touch the next.
    pub fresh_per_round: bool,
}

impl Figure {
    /// The measurement of `ours` beside `raw`, medians of the rounds, with the rounds and
    /// the PostgreSQL note attached.
    #[must_use]
    pub fn measurement(
        &self,
        ours: &[f64],
        raw: &[f64],
        target: Target,
        load: Load,
    ) -> Measurement {
        Measurement::new(
            self.name,
            self.group,
            "msg/s",
            crate::payload::median(ours),
            crate::payload::median(raw),
            self.baseline,
            target,
            load,
        )
        .detail("postroom_rounds", ours)
        .detail("raw_rounds", raw)
        .note(PG_FSYNC_NOTE)
    }
}

/// Run `round` on the scenario's `shared` workload, or, when there is none, on a fresh one
/// made for this round and deleted after it.
pub async fn on_workload<W: BrokerWorkload>(
    ctx: &Ctx,
    scenario: &str,
    shared: Option<&W>,
    round: impl AsyncFnOnce(&W) -> Result<f64, BenchError>,
) -> Result<f64, BenchError> {
    if let Some(w) = shared {
        return round(w).await;
    }
    let w = W::create(ctx, scenario).await?;
    let r = round(&w).await;
    w.delete().await?;
    r
}
