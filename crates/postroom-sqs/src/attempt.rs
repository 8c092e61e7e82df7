//! The attempt number of a received message (the `x-retry-attempt` its handler sees), derived
//! from what SQS counts, never from a counter a consumer keeps in memory: a restarted consumer
//! process, or a second one, must see the same number.
//!
//! A retry on SQS sends no new copy: the consumer hides the same message for the ladder's
//! delay (`ChangeMessageVisibility`), and SQS counts every receive of a message in
//! `ApproximateReceiveCount` (1 on the first). So the receive count says which attempt a
//! receive is: the first receive is attempt 0, the receive after one retry is attempt 1.
//!
//! Every *send* starts a new SQS message whose count starts again at 0, and the copy itself
//! says how its history continues:
//! - a redrive (an operator sends a parked message back; its redrive history travels in
//!   `x-redrive-count`) carries no `x-retry-attempt`: a fresh budget, attempt 0 on its first
//!   receive, which is what redrive promises;
//! - a copy sent by whatever already retried it (a pipeline stage, a copy moved from another
//!   transport) carries `x-retry-attempt = k`: the retries made before this SQS message existed.
//!
//! Hence: attempt = (`x-retry-attempt` carried by the message, 0 when absent)
//! + `ApproximateReceiveCount` − 1.
//!
//! SQS counts receives that no handler saw (a message received into the buffer and released
//! at shutdown, a consumer that died before handling it): the number then runs ahead of the
//! handler calls. The ladder moves to a longer delay sooner and the budget ends sooner —
//! never an earlier or an extra retry — just as SQS's own `maxReceiveCount` counts those
//! receives.

use postroom_core::message::{Headers, attempt_of, headers as h};
use postroom_core::parking::{LastError, LastErrorLog};

/// The attempt of a message carrying `carried` earlier retries on its `receive_count`th
/// receive (1 on the first).
#[must_use]
pub fn derive(carried: u32, receive_count: u32) -> u32 {
    carried.saturating_add(receive_count.saturating_sub(1))
}

/// Set `x-retry-attempt` from the receive count, and the first failure and last error the
/// consumer recorded (SQS could not carry them in the message, which was never sent again):
/// the same headers a retry copy carries on transports that send one.
pub fn annotate(headers: &mut Headers, receive_count: u32, last: Option<&LastError>) {
    let attempt = derive(attempt_of(headers), receive_count);
    if attempt > 0 {
        headers.insert(h::RETRY_ATTEMPT.into(), attempt.to_string());
    }
    if let Some(last) = last {
        headers
            .entry(h::FIRST_FAILURE_AT.into())
            .or_insert_with(|| last.first_failure_at.to_rfc3339());
        headers.insert(h::LAST_ERROR_CLASS.into(), last.class.as_str().into());
        headers.insert(h::LAST_ERROR_CODE.into(), last.code.clone());
        headers.insert(h::LAST_ERROR.into(), last.message.clone());
    }
}

/// The last error recorded for `(consumer, id)`; a log that fails to answer is only
/// diagnostics lost, never a failed receive.
pub async fn lookup(
    log: &dyn LastErrorLog,
    consumer: &str,
    id: postroom_core::MessageId,
) -> Option<LastError> {
    match log.get(consumer, id).await {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(error = %e, "last-error log lookup failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_from_receive_count_and_carried_retries() {
        assert_eq!(derive(0, 1), 0, "first receive");
        assert_eq!(derive(0, 3), 2, "after two retries");
        assert_eq!(derive(2, 1), 2, "a copy that made two retries elsewhere");
        assert_eq!(derive(0, 0), 0, "a count SQS did not report");
        let mut headers = Headers::new();
        annotate(&mut headers, 1, None);
        assert!(headers.is_empty(), "nothing on a first receive");
        let last = LastError {
            first_failure_at: chrono::Utc::now(),
            at: chrono::Utc::now(),
            class: postroom_core::ErrorClass::Transient,
            code: "db_down".into(),
            message: "refused".into(),
        };
        annotate(&mut headers, 3, Some(&last));
        assert_eq!(headers.get(h::RETRY_ATTEMPT).map(String::as_str), Some("2"));
        assert_eq!(
            headers.get(h::LAST_ERROR_CODE).map(String::as_str),
            Some("db_down")
        );
        assert!(headers.contains_key(h::FIRST_FAILURE_AT));
    }
}
