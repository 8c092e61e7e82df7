//! SQS errors mapped into postroom's portable kinds. A service error is classified by its code;
//! a request that never got an answer by what went wrong on the way. Messages name the action
//! and the queue, never credentials.

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use postroom_core::{Error, ErrorKind};

/// The kind of an SQS error code (service errors and batch entry failures alike).
/// `sender_fault` is the batch entry's flag (`None` for a whole-call error): an entry that
/// failed by the service's fault is worth repeating whatever its code.
#[must_use]
pub fn kind_of_code(code: &str, sender_fault: Option<bool>) -> ErrorKind {
    let code = code.trim_start_matches("AWS.SimpleQueueService.");
    match code {
        "NonExistentQueue" | "QueueDoesNotExist" => ErrorKind::NotFound,
        "RequestThrottled"
        | "ThrottlingException"
        | "KmsThrottled"
        | "OverLimit"
        | "QueueDeletedRecently"
        | "PurgeQueueInProgress" => ErrorKind::Busy,
        "ServiceUnavailable" | "InternalError" | "InternalFailure" | "KmsUnavailable" => {
            ErrorKind::Connection
        }
        "ReceiptHandleIsInvalid" | "InvalidReceiptHandle" | "MessageNotInflight" => {
            ErrorKind::Closed
        }
        "QueueAlreadyExists"
        | "QueueNameExists"
        | "AccessDenied"
        | "AccessDeniedException"
        | "InvalidClientTokenId"
        | "UnrecognizedClientException"
        | "InvalidSecurity"
        | "SignatureDoesNotMatch"
        | "ExpiredToken"
        | "MissingAuthenticationToken"
        | "InvalidAddress" => ErrorKind::Config,
        "UnsupportedOperation" => ErrorKind::Unsupported,
        _ if sender_fault == Some(false) => ErrorKind::Connection,
        _ => ErrorKind::InvalidData,
    }
}

/// True when `code` says the receipt handle no longer owns the message: its visibility ran
/// out and it was received again (or deleted).
#[must_use]
pub fn is_ownership_lost(code: &str, message: &str) -> bool {
    matches!(
        code,
        "ReceiptHandleIsInvalid" | "InvalidReceiptHandle" | "MessageNotInflight"
    ) || (code == "InvalidParameterValue" && message.contains("receipt handle has expired"))
}

/// An SDK error as a postroom error, with `context` (the action and queue) in front.
pub fn sdk<E>(context: impl std::fmt::Display, e: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let (kind, text) = match &e {
        SdkError::ConstructionFailure(_) => (
            ErrorKind::Config,
            "the request could not be built (is a region set? AWS_REGION)".to_string(),
        ),
        SdkError::TimeoutError(_) => (ErrorKind::Timeout, "timed out".to_string()),
        SdkError::DispatchFailure(d) => {
            let kind = if d.is_timeout() {
                ErrorKind::Timeout
            } else if d.is_user() {
                ErrorKind::Config
            } else {
                ErrorKind::Connection
            };
            let why = d
                .as_connector_error()
                .map_or_else(|| "no detail".to_string(), |c| in_words(c));
            (kind, format!("request not delivered: {why}"))
        }
        SdkError::ResponseError(_) => (ErrorKind::Io, "unreadable response".to_string()),
        SdkError::ServiceError(s) => {
            let err = s.err();
            let code = err.code().unwrap_or("");
            let status = s.raw().status().as_u16();
            let kind = if code.is_empty() && status >= 500 {
                ErrorKind::Connection
            } else {
                kind_of_code(code, None)
            };
            (
                kind,
                format!("{code} (HTTP {status}): {}", err.message().unwrap_or("")),
            )
        }
        _ => (ErrorKind::Io, "unexpected SDK error".to_string()),
    };
    Error::new(kind, format!("{context}: {text}"))
}

/// `e` and its sources, each in its own words, without repeats: `tcp connect error:
/// Connection refused (os error 111)`.
fn in_words(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = err.source();
    }
    if parts.is_empty() {
        "no detail".to_string()
    } else {
        parts.join(": ")
    }
}

/// The service error code of an SDK error, if it is one.
pub fn code_of<E, R>(e: &SdkError<E, R>) -> Option<(&str, &str)>
where
    E: ProvideErrorMetadata,
{
    match e {
        SdkError::ServiceError(s) => Some((s.err().code()?, s.err().message().unwrap_or(""))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        assert_eq!(
            kind_of_code("AWS.SimpleQueueService.NonExistentQueue", None),
            ErrorKind::NotFound
        );
        assert_eq!(kind_of_code("RequestThrottled", None), ErrorKind::Busy);
        assert_eq!(
            kind_of_code("InvalidParameterValue", Some(true)),
            ErrorKind::InvalidData
        );
        assert_eq!(
            kind_of_code("SomethingNew", Some(false)),
            ErrorKind::Connection,
            "the service's fault is worth repeating"
        );
        assert!(is_ownership_lost("ReceiptHandleIsInvalid", ""));
        assert!(is_ownership_lost(
            "InvalidParameterValue",
            "Value x for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
        ));
        assert!(!is_ownership_lost("InvalidParameterValue", "DelaySeconds"));
    }
}
