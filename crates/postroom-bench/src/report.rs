//! Results: one [`Measurement`] per figure, printed as a table and written as JSON.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Which way a ratio must go to meet its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Goal {
    /// The ratio must be at least the target (throughput against raw).
    #[serde(rename = ">=")]
    AtLeast,
    /// The ratio must be at most the target (latency, CPU, memory against a budget).
    #[serde(rename = "<=")]
    AtMost,
    /// No target: the figure is reported for context.
    #[serde(rename = "report")]
    Report,
}

/// A target for a ratio.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Target {
    /// Direction.
    pub goal: Goal,
    /// Threshold on the ratio.
    pub value: f64,
}

impl Target {
    /// The ratio must be at least `value`.
    #[must_use]
    pub fn at_least(value: f64) -> Self {
        Self {
            goal: Goal::AtLeast,
            value,
        }
    }
    /// The ratio must be at most `value`.
    #[must_use]
    pub fn at_most(value: f64) -> Self {
        Self {
            goal: Goal::AtMost,
            value,
        }
    }
    /// No target.
    #[must_use]
    pub fn report() -> Self {
        Self {
            goal: Goal::Report,
            value: f64::NAN,
        }
    }
    /// Whether `ratio` meets it (`None` when there is no target).
    #[must_use]
    pub fn met_by(&self, ratio: f64) -> Option<bool> {
        match self.goal {
            Goal::AtLeast => Some(ratio >= self.value),
            Goal::AtMost => Some(ratio <= self.value),
            Goal::Report => None,
        }
    }
    fn text(&self) -> String {
        match self.goal {
            Goal::AtLeast => format!(">= {:.2}", self.value),
            Goal::AtMost => format!("<= {:.2}", self.value),
            Goal::Report => "report".into(),
        }
    }
}

/// The shape of the load a figure was measured under.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Load {
    /// Message body size in bytes.
    pub payload_bytes: usize,
    /// Handlers (or relays) running at once.
    pub concurrency: usize,
    /// Broker prefetch (0 where none applies).
    pub prefetch: usize,
    /// Rows per claim / messages per transaction or publish window.
    pub batch_size: usize,
    /// Messages in the run.
    pub messages: usize,
}

impl Load {
    /// A load shape.
    #[must_use]
    pub fn new(
        payload_bytes: usize,
        concurrency: usize,
        prefetch: usize,
        batch_size: usize,
        messages: usize,
    ) -> Self {
        Self {
            payload_bytes,
            concurrency,
            prefetch,
            batch_size,
            messages,
        }
    }
}

/// One figure of postroom beside its baseline.
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// Stable name, e.g. `relay_pg_rabbitmq`.
    pub name: String,
    /// The scenario group it belongs to (`--scenario` value).
    pub scenario: String,
    /// postroom's figure.
    pub postroom: f64,
    /// The baseline's figure.
    pub baseline: f64,
    /// What the baseline is (a raw loop, a budget, the per-message mode).
    pub baseline_kind: String,
    /// Unit of both figures.
    pub unit: String,
    /// `postroom / baseline`.
    pub ratio: f64,
    /// The target on the ratio.
    pub target: Target,
    /// Whether the ratio meets the target (`null` for report-only figures).
    pub meets_target: Option<bool>,
    /// Load shape.
    #[serde(flatten)]
    pub load: Load,
    /// Cores of the machine.
    pub cores: usize,
    /// Further figures (percentiles, counts, server settings).
    pub details: BTreeMap<String, serde_json::Value>,
    /// Caveats.
    pub notes: Vec<String>,
}

impl Measurement {
    /// A measurement; the ratio and verdict are computed here.
    #[must_use]
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        scenario: &str,
        unit: &str,
        postroom: f64,
        baseline: f64,
        baseline_kind: &str,
        target: Target,
        load: Load,
    ) -> Self {
        let ratio = if baseline == 0.0 && postroom == 0.0 {
            0.0
        } else {
            postroom / baseline
        };
        Self {
            name: name.into(),
            scenario: scenario.into(),
            postroom,
            baseline,
            baseline_kind: baseline_kind.into(),
            unit: unit.into(),
            ratio,
            target,
            meets_target: target.met_by(ratio),
            load,
            cores: crate::sys::cores(),
            details: BTreeMap::new(),
            notes: Vec::new(),
        }
    }

    /// Add a detail figure.
    #[must_use]
    pub fn detail(mut self, key: &str, value: impl Serialize) -> Self {
        self.details.insert(
            key.into(),
            serde_json::to_value(value).unwrap_or(serde_json::Value::Null),
        );
        self
    }

    /// Add a note.
    #[must_use]
    pub fn note(mut self, text: impl Into<String>) -> Self {
        self.notes.push(text.into());
        self
    }
}

/// Everything one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Cores of the machine.
    pub cores: usize,
    /// The PostgreSQL server's durability settings, when PostgreSQL was used.
    pub postgres_settings: Option<String>,
    /// The measurements, in run order.
    pub results: Vec<Measurement>,
    /// Scenarios that failed to run, with the error.
    pub failures: Vec<String>,
    /// Caveats about the whole run.
    pub notes: Vec<String>,
}

impl BenchReport {
    /// The table printed at the end of a run.
    #[must_use]
    pub fn table(&self) -> String {
        let mut out = String::new();
        // The first column as wide as the longest name, so the figures stay aligned.
        let w = self
            .results
            .iter()
            .map(|m| m.name.len())
            .max()
            .unwrap_or(0)
            .max(28);
        let _ = writeln!(
            out,
            "{:<w$} {:>12} {:>12} {:<9} {:>8} {:>8}  {:<4} {:>6} {:>4} {:>4} {:>5}",
            "measurement",
            "postroom",
            "baseline",
            "unit",
            "ratio",
            "target",
            "ok",
            "bytes",
            "conc",
            "pref",
            "batch"
        );
        for m in &self.results {
            let ok = match m.meets_target {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            let _ = writeln!(
                out,
                "{:<w$} {:>12} {:>12} {:<9} {:>8.3} {:>8}  {:<4} {:>6} {:>4} {:>4} {:>5}",
                m.name,
                fmt_figure(m.postroom),
                fmt_figure(m.baseline),
                m.unit,
                m.ratio,
                m.target.text(),
                ok,
                m.load.payload_bytes,
                m.load.concurrency,
                m.load.prefetch,
                m.load.batch_size
            );
        }
        let _ = writeln!(out, "cores: {}", self.cores);
        if let Some(s) = &self.postgres_settings {
            let _ = writeln!(out, "postgresql: {s}");
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        for m in &self.results {
            for n in m.notes.iter().filter(|n| !self.notes.contains(n)) {
                let _ = writeln!(out, "note ({}): {n}", m.name);
            }
        }
        for f in &self.failures {
            let _ = writeln!(out, "FAILED: {f}");
        }
        out
    }
}

fn fmt_figure(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
