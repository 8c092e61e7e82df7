//! Metric names (R15). Recorded through the `metrics` facade; install any exporter
//! (the CLI installs the Prometheus one).

/// Counter: messages handled, labels `consumer`, `result` (applied, duplicate, business_outcome).
pub const HANDLED: &str = "postroom_handled_total";
/// Counter: handler errors, labels `consumer`, `class`.
pub const HANDLER_ERRORS: &str = "postroom_handler_errors_total";
/// Counter: retries scheduled, labels `consumer`, `stage`.
pub const RETRIED: &str = "postroom_retries_total";
/// Counter: messages parked, labels `consumer`, `code`.
pub const PARKED: &str = "postroom_parked_total";
/// Counter: settling acts (ack, retry, park) that failed, labels `consumer`, `act`.
pub const SETTLE_FAILED: &str = "postroom_settle_failed_total";
/// Histogram: handling time in seconds, label `consumer`.
pub const HANDLING_SECONDS: &str = "postroom_handling_seconds";
/// Histogram: retries a message needed before success, label `consumer`.
pub const RETRIES_PER_MESSAGE: &str = "postroom_retries_per_message";
/// Gauge: age of the oldest ready message in seconds, label `consumer`.
pub const OLDEST_READY_AGE: &str = "postroom_oldest_ready_age_seconds";
/// Gauge: ready messages, label `consumer`.
pub const READY: &str = "postroom_ready_messages";
/// Gauge: unacked messages, label `consumer`.
pub const UNACKED: &str = "postroom_unacked_messages";
/// Gauge: messages waiting in delay stages, label `consumer`.
pub const DELAYED: &str = "postroom_delayed_messages";
/// Gauge: 1 while the consumer's circuit breaker is open, label `consumer`.
pub const BREAKER_OPEN: &str = "postroom_breaker_open";
/// Counter: messages published by the relay, label `relay`.
pub const RELAY_PUBLISHED: &str = "postroom_relay_published_total";
/// Counter: relay publishes that failed, labels `relay`, `kind`.
pub const RELAY_FAILED: &str = "postroom_relay_publish_failed_total";
/// Histogram: publish-to-confirm latency in seconds, label `transport`.
pub const CONFIRM_SECONDS: &str = "postroom_publish_confirm_seconds";
/// Counter: unroutable returns, label `transport`.
pub const UNROUTABLE: &str = "postroom_unroutable_total";
/// Counter: reconnects, label `transport`.
pub const RECONNECTS: &str = "postroom_reconnects_total";
/// Counter: consumer cancellations by the broker, label `transport`.
pub const CANCELLATIONS: &str = "postroom_consumer_cancellations_total";
/// Gauge: unpublished outbox rows.
pub const OUTBOX_PENDING: &str = "postroom_outbox_pending";
