//! The retry bookkeeping a copy carries, the same on every transport: the attempt in
//! postroom's own header (never in broker bookkeeping such as `x-death`), when the first
//! failure happened, the route it was first published with, and the last error.

use crate::message::{Headers, headers as h, truncate};
use crate::outcome::RetryPlan;
use crate::transport::ReceivedMessage;
use chrono::Utc;

/// Longest error text carried in a header.
pub const MAX_HEADER_ERROR_CHARS: usize = 500;

/// Headers for the retry copy of `msg` under `plan` (same id; attempt, first failure and
/// last error recorded).
#[must_use]
pub fn retry_headers(msg: &ReceivedMessage, plan: &RetryPlan) -> Headers {
    let mut headers = msg.headers.clone();
    headers.insert(h::RETRY_ATTEMPT.into(), plan.attempt.to_string());
    headers
        .entry(h::FIRST_FAILURE_AT.into())
        .or_insert_with(|| Utc::now().to_rfc3339());
    headers
        .entry(h::ORIGINAL_ROUTE.into())
        .or_insert_with(|| msg.routing_key.clone());
    headers.insert(h::LAST_ERROR_CLASS.into(), plan.error_class.as_str().into());
    headers.insert(h::LAST_ERROR_CODE.into(), plan.error_code.clone());
    headers.insert(
        h::LAST_ERROR.into(),
        truncate(&plan.error_message, MAX_HEADER_ERROR_CHARS),
    );
    headers
}
