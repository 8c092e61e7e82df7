//! Copies in a DLQ, as the parking ingest reads them. A copy the consumer parked carries every
//! diagnostic (`x-parked-by` and the rest, see [`postroom_core::parking::codec`]). A copy SQS
//! moved there by itself, after `maxReceiveCount` receives, carries only what its producer
//! sent: it is described in the `x-dead-letter-*` headers (reason `max_receive_count`, the
//! source queue, the count), joined with the last error the consumer recorded for it (SQS
//! moved the message without the consumer's say, so the record is all there is).

use crate::subscriber::DeadLetterSource;
use postroom_core::message::{Headers, headers as h};
use postroom_core::parking::LastError;
use postroom_core::parking::codec as park;

/// The reason given for copies SQS moved by itself.
pub const MAX_RECEIVE_COUNT: &str = "max_receive_count";

/// Describe a copy read from the DLQ of `source`. `from_arn` is SQS's
/// `DeadLetterQueueSourceArn`, when it sent one.
/// `route` is the topic the message was published to, when it says.
pub(crate) fn describe(
    headers: &mut Headers,
    source: &DeadLetterSource,
    route: Option<&str>,
    from_arn: Option<&str>,
    last: Option<&LastError>,
) {
    if headers.contains_key(h::PARKED_BY) {
        return;
    }
    if let Some(route) = route.filter(|r| !r.is_empty()) {
        headers
            .entry(h::ORIGINAL_ROUTE.into())
            .or_insert_with(|| route.to_string());
    }
    let from = from_arn
        .and_then(|arn| arn.rsplit(':').next())
        .unwrap_or(&source.queue_name);
    headers.insert(park::DEAD_LETTER_REASON.into(), MAX_RECEIVE_COUNT.into());
    headers.insert(park::DEAD_LETTERED_FROM.into(), from.to_string());
    headers.insert(
        park::DEAD_LETTER_COUNT.into(),
        source.max_receive_count.to_string(),
    );
    if let Some(last) = last {
        headers.insert(
            h::FIRST_FAILURE_AT.into(),
            last.first_failure_at.to_rfc3339(),
        );
        headers.insert(h::LAST_ERROR_CLASS.into(), last.class.as_str().into());
        headers.insert(h::LAST_ERROR_CODE.into(), last.code.clone());
        headers.insert(
            h::LAST_ERROR.into(),
            format!("{} ({}): {}", last.code, last.class, last.message),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::parking::codec::from_headers;
    use postroom_testkit::cases::assert_parked_for;

    #[test]
    fn a_copy_sqs_moved_is_described_and_joined_with_the_last_error() {
        let source = DeadLetterSource {
            queue_name: "shop-inventory".into(),
            max_receive_count: 5,
        };
        let t0 = chrono::Utc::now() - chrono::Duration::seconds(90);
        let last = LastError {
            first_failure_at: t0,
            at: chrono::Utc::now(),
            class: postroom_core::ErrorClass::Transient,
            code: "db_down".into(),
            message: "connection refused".into(),
        };
        let mut headers = Headers::new();
        describe(&mut headers, &source, None, None, Some(&last));
        let rec = from_headers("inventory", None, "shop-inventory-dlq", &headers, b"{}");
        assert_parked_for(&rec, MAX_RECEIVE_COUNT, 5, "db_down");
        assert_eq!(rec.routing_key, "shop-inventory");
        assert_eq!(rec.first_failure_at.timestamp(), t0.timestamp());

        let mut parked = Headers::new();
        parked.insert(h::PARKED_BY.into(), "inventory".into());
        describe(
            &mut parked,
            &source,
            Some("order.created"),
            Some("arn:aws:sqs:r:1:x"),
            Some(&last),
        );
        assert_eq!(
            parked.len(),
            1,
            "a copy the consumer parked is left as it is"
        );
    }
}
