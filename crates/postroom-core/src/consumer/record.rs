//! The parking record of a message: every diagnostic the consumer knows.

use super::ConsumerConfig;
use crate::envelope::Envelope;
use crate::message::{headers as h, truncate};
use crate::outcome::ParkReason;
use crate::parking::{MAX_ERROR_CHARS, ParkedMessage, ParkedStatus};
use crate::transport::ReceivedMessage;
use chrono::Utc;

/// The parking record for `msg`, with its id (see [`ReceivedMessage::stable_id`]), type and
/// schema version, attempts, first failure time, the last error, correlation and trace ids,
/// original route, producer, and the consumer's name and version.
#[must_use]
pub fn parked_record(
    cfg: &ConsumerConfig,
    msg: &ReceivedMessage,
    envelope: Option<&Envelope>,
    reason: &ParkReason,
) -> ParkedMessage {
    let now = Utc::now();
    let first_failure_at = msg
        .headers
        .get(h::FIRST_FAILURE_AT)
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map_or(now, |t| t.with_timezone(&Utc));
    // The envelope's id first: a foreign message's id is derived from its header, and a retry
    // copy of it may carry another transport id.
    let message_id = envelope
        .map(|e| e.id)
        .or(msg.id)
        .unwrap_or_else(|| msg.stable_id());
    ParkedMessage {
        message_id,
        consumer: cfg.name.clone(),
        consumer_version: cfg.version.clone(),
        message_type: envelope
            .map(|e| e.message_type.clone())
            .or_else(|| msg.headers.get(h::MESSAGE_TYPE).cloned()),
        schema_version: envelope.map(|e| e.schema_version),
        attempts: msg.attempt().saturating_add(1),
        first_failure_at,
        parked_at: now,
        error_class: reason.error_class,
        error_code: reason.error_code.clone(),
        error_message: truncate(&reason.error_message, MAX_ERROR_CHARS),
        correlation_id: envelope
            .and_then(|e| e.correlation_id.clone())
            .or_else(|| msg.headers.get(h::CORRELATION_ID).cloned()),
        traceparent: envelope
            .and_then(|e| e.trace.traceparent.clone())
            .or_else(|| msg.headers.get(h::TRACEPARENT).cloned()),
        routing_key: msg
            .headers
            .get(h::ORIGINAL_ROUTE)
            .cloned()
            .unwrap_or_else(|| msg.routing_key.clone()),
        producer: envelope
            .map(|e| e.producer.clone())
            .or_else(|| msg.headers.get(h::PRODUCER).cloned()),
        headers: msg.headers.clone(),
        body: msg.body.clone(),
        status: ParkedStatus::Parked,
        redrive_count: msg
            .headers
            .get(h::REDRIVE_COUNT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    }
}

/// The one log line of a parked message, once its record is stored: the consumer, the
/// message's id and type, the code and the error. A message parked at the crash-loop bound
/// (it killed or hung its consumer) or on a version gap that never filled (its aggregate
/// waits behind it) is an ERROR that says ALERT; any other a WARN.
pub fn log_parked(consumer: &str, record: &ParkedMessage, reason: &ParkReason) {
    use crate::outcome::codes::Code;
    let message_type = record.message_type.as_deref().unwrap_or("<undecodable>");
    let alert = match reason.postroom_code() {
        Some(Code::CrashLoop) => Some("it kills or hangs its consumer"),
        Some(Code::VersionGap) => Some("the version gap before it never filled"),
        _ => None,
    };
    if let Some(why) = alert {
        tracing::error!(
            consumer,
            message_id = %record.message_id,
            message_type,
            code = %reason.error_code,
            error = %reason.error_message,
            "ALERT: message parked: {why}"
        );
    } else {
        tracing::warn!(
            consumer,
            message_id = %record.message_id,
            message_type,
            code = %reason.error_code,
            error = %reason.error_message,
            "message parked"
        );
    }
}
