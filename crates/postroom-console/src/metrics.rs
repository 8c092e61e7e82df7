//! The console's own metric names (the pipeline's are in [`postroom_core::metrics`]), and
//! the Prometheus recorder that serves both at `/metrics`.

use metrics_exporter_prometheus::PrometheusBuilder;
pub use metrics_exporter_prometheus::PrometheusHandle;
use postroom_core::{Error, ErrorKind, Result};

/// Gauge: age in seconds of the oldest unpublished outbox row (0 when none waits).
pub const RELAY_LAG: &str = "postroom_console_relay_lag_seconds";
/// Gauge: parked copies waiting for an operator (not redriven, not archived), label
/// `consumer`.
pub const PARKED_WAITING: &str = "postroom_console_parked_messages";
/// Gauge: messages parked in the last minute, label `consumer`.
pub const PARKING_INFLOW: &str = "postroom_console_parking_inflow_per_minute";
/// Gauge: messages handled in the last minute, label `consumer`.
pub const HANDLED_PER_MINUTE: &str = "postroom_console_handled_per_minute";
/// Counter: messages sent back by redrive runs the console drives.
pub const REDRIVEN: &str = "postroom_console_redriven_total";
/// Counter: redrive runs, label `event` (started, finished, cancelled, failed).
pub const REDRIVE_RUNS: &str = "postroom_console_redrive_runs_total";
/// Counter: audited state changes, label `action`.
pub const AUDIT_EVENTS: &str = "postroom_console_audit_events_total";
/// Counter: login attempts, label `result` (ok, refused).
pub const LOGINS: &str = "postroom_console_logins_total";
/// Counter: requests refused, label `reason` (csrf, role, login).
pub const REFUSED: &str = "postroom_console_refused_total";
/// Gauge: 1 while the last readiness check passed.
pub const READY: &str = "postroom_console_ready";

/// Gauge: 1 while a watched inbox feed answered its last reading with its figures, 0 while
/// it did not, label `feed` (the name the console was given).
pub const FEED_UP: &str = "postroom_console_feed_up";
/// Gauge: messages a watched inbox feed stored since it started, labels `feed`, `consumer`.
pub const FEED_STORED: &str = "postroom_console_feed_stored";
/// Gauge: copies a watched inbox feed absorbed (already stored) since it started, labels
/// `feed`, `consumer`.
pub const FEED_DUPLICATES: &str = "postroom_console_feed_duplicates";
/// Gauge: messages on a watched inbox feed's broker not yet stored, labels `feed`,
/// `consumer`.
pub const FEED_LAG: &str = "postroom_console_feed_lag_messages";

/// Every name above.
pub const ALL: &[&str] = &[
    RELAY_LAG,
    PARKED_WAITING,
    PARKING_INFLOW,
    HANDLED_PER_MINUTE,
    REDRIVEN,
    REDRIVE_RUNS,
    AUDIT_EVENTS,
    LOGINS,
    REFUSED,
    READY,
    FEED_UP,
    FEED_STORED,
    FEED_DUPLICATES,
    FEED_LAG,
];

/// Install the Prometheus recorder for this process and return its handle. Fails when
/// another recorder is installed already (pass that one's handle to the console instead).
pub fn install_prometheus() -> Result<PrometheusHandle> {
    PrometheusBuilder::new().install_recorder().map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("cannot install the Prometheus recorder: {e}"),
        )
    })
}
