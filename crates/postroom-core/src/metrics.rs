//! Every metric name postroom records, and nowhere else. Recorded through the `metrics`
//! facade; install any exporter (the command line serves the Prometheus one).

/// Counter: messages handled, labels `consumer`, `result` (applied, duplicate, business_outcome).
pub const HANDLED: &str = "postroom_handled_total";
/// Counter: handler errors, labels `consumer`, `class`.
pub const HANDLER_ERRORS: &str = "postroom_handler_errors_total";
/// Counter: handler panics (each counted as an unknown error), label `consumer`.
pub const HANDLER_PANICS: &str = "postroom_handler_panics_total";
/// Counter: copies parked because they reached the crash-loop bound, label `consumer`.
pub const CRASH_LOOPS: &str = "postroom_crash_loops_total";
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
/// Counter: publishes whose confirm did not come within the timeout (the message was handed
/// back), label `transport`.
pub const CONFIRM_TIMEOUTS: &str = "postroom_publish_confirm_timeouts_total";
/// Counter: unroutable returns, label `transport`.
pub const UNROUTABLE: &str = "postroom_unroutable_total";
/// Counter: reconnects, label `transport`.
pub const RECONNECTS: &str = "postroom_reconnects_total";
/// Counter: consumer cancellations by the broker, label `transport`.
pub const CANCELLATIONS: &str = "postroom_consumer_cancellations_total";
/// Gauge: unpublished outbox rows.
pub const OUTBOX_PENDING: &str = "postroom_outbox_pending";
/// Gauge: bytes of write-ahead log between the server's current position and the WAL relay's
/// slot's confirmed position (what the slot holds back and the relay has still to read or
/// confirm), label `slot`.
pub const WAL_SLOT_LAG_BYTES: &str = "postroom_wal_slot_lag_bytes";
/// Gauge: bytes of log the server may still write before it invalidates the WAL relay's slot
/// (`max_slot_wal_keep_size`; absent while the slot is unbounded), label `slot`.
pub const WAL_SLOT_SAFE_BYTES: &str = "postroom_wal_slot_safe_bytes";
/// Gauge: age in seconds of the oldest commit the WAL relay read and has not wholly published
/// (0 when it holds none), label `slot`.
pub const WAL_OLDEST_UNPUBLISHED_AGE: &str = "postroom_wal_oldest_unpublished_age_seconds";
/// Gauge: 1 while this WAL relay reads its slot, 0 while it stands by (another relay reads
/// it), labels `slot`, `relay`.
pub const WAL_RELAY_ACTIVE: &str = "postroom_wal_relay_active";
/// Counter: inbox-queue rows whose retry was scheduled, label `consumer`.
pub const INBOX_QUEUE_RETRIED: &str = "postroom_inbox_queue_retried_total";
/// Counter: inbox-queue rows parked, labels `consumer`, `code`.
pub const INBOX_QUEUE_PARKED: &str = "postroom_inbox_queue_parked_total";
/// Counter: inbox-queue rows parked because a sequence gap never filled, label `consumer`.
pub const INBOX_QUEUE_GAP_PARKED: &str = "postroom_inbox_queue_gap_parked_total";
/// Counter: messages a fan-out publisher's target did not confirm (the row is published
/// again to every target), label `target`.
pub const FAN_OUT_UNCONFIRMED: &str = "postroom_fan_out_unconfirmed_total";
/// Gauge: 1 for each broker a relay publishes every row to, 0 for one it stopped publishing
/// to, label `target`.
pub const RELAY_TARGET: &str = "postroom_relay_target";
/// Counter: deliveries an inbox feed stored as new, labels `consumer`, `feed`.
pub const INBOX_FEED_STORED: &str = "postroom_inbox_feed_stored_total";
/// Counter: deliveries an inbox feed found already stored (by this feed or another one) and
/// acked without storing again, labels `consumer`, `feed`.
pub const INBOX_FEED_DUPLICATES: &str = "postroom_inbox_feed_duplicates_total";
/// Gauge: messages of an inbox feed's consumer on its broker not yet stored (ready, unacked
/// and delayed), labels `consumer`, `feed`.
pub const INBOX_FEED_LAG: &str = "postroom_inbox_feed_lag_messages";
/// Counter: messages stored into the parking store by the parking ingest, label `consumer`.
pub const PARKING_INGESTED: &str = "postroom_parking_ingested_total";
/// Counter: deliveries whose ownership was lost before they settled (a lease or visibility
/// timeout ran out, a partition was revoked): a duplicate will come, the inbox absorbs it.
/// Labels `consumer`, `transport`.
pub const OWNERSHIP_LOST: &str = "postroom_ownership_lost_total";
/// Counter: batches whose transaction failed and were split to isolate the failure, label
/// `consumer`.
pub const BATCH_SPLITS: &str = "postroom_batch_splits_total";
/// Histogram: time of one batch handler call in seconds, label `consumer`.
pub const BATCH_SECONDS: &str = "postroom_batch_seconds";
/// Histogram: messages per batch handler call, label `consumer`.
pub const BATCH_SIZE: &str = "postroom_batch_size";
