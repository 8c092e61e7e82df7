//! NATS and JetStream failures mapped into postroom's error kinds, with the server's code kept
//! in the text. Every JetStream API call of this crate goes through [`api`] so that one table
//! decides what is transient.

use async_nats::jetstream::context::{
    PublishError, PublishErrorKind, RequestError, RequestErrorKind,
};
use async_nats::jetstream::response::Response;
use async_nats::jetstream::{Error as ApiError, ErrorCode};
use postroom_core::{Error, ErrorKind, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The kind of a JetStream API error code.
#[must_use]
pub fn api_kind(code: ErrorCode) -> ErrorKind {
    match code {
        ErrorCode::STREAM_NOT_FOUND
        | ErrorCode::CONSUMER_NOT_FOUND
        | ErrorCode::NO_MESSAGE_FOUND => ErrorKind::NotFound,
        ErrorCode::CLUSTER_NOT_AVAILABLE | ErrorCode::INSUFFICIENT_RESOURCES => {
            ErrorKind::Connection
        }
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM => ErrorKind::InvalidData,
        _ => ErrorKind::Config,
    }
}

/// An API error with what was being done.
#[must_use]
pub fn from_api(doing: &str, e: &ApiError) -> Error {
    Error::new(
        api_kind(e.error_code()),
        format!("{doing}: JetStream error {} ({})", e.error_code().0, e),
    )
}

/// A failed request (no answer, no responders, timeout).
#[must_use]
pub fn from_request(doing: &str, e: &RequestError) -> Error {
    let kind = match e.kind() {
        RequestErrorKind::TimedOut => ErrorKind::Timeout,
        RequestErrorKind::NoResponders => ErrorKind::Connection,
        RequestErrorKind::InvalidSubject => ErrorKind::Config,
        RequestErrorKind::Other => ErrorKind::Connection,
    };
    Error::new(kind, format!("{doing}: {e}"))
}

/// A failed JetStream publish.
#[must_use]
pub fn from_publish(doing: &str, e: &PublishError) -> Error {
    let kind = match e.kind() {
        PublishErrorKind::StreamNotFound => ErrorKind::Unroutable,
        PublishErrorKind::TimedOut => ErrorKind::Timeout,
        PublishErrorKind::BrokenPipe => ErrorKind::Connection,
        PublishErrorKind::MaxAckPending => ErrorKind::Busy,
        PublishErrorKind::MaxPayloadExceeded => ErrorKind::InvalidData,
        PublishErrorKind::WrongLastMessageId
        | PublishErrorKind::WrongLastSequence
        | PublishErrorKind::Other => ErrorKind::Nacked,
    };
    Error::new(kind, format!("{doing}: {e}"))
}

/// A core NATS client failure (publish, subscribe, flush): the connection.
#[must_use]
pub fn from_client(doing: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Connection, format!("{doing}: {e}"))
}

/// Call the JetStream API `subject` (without the `$JS.API.` prefix) with `payload`.
pub async fn api<T: DeserializeOwned, P: Serialize + ?Sized>(
    js: &async_nats::jetstream::Context,
    doing: &str,
    subject: String,
    payload: &P,
) -> Result<T> {
    match js.request::<_, _, Response<T>>(subject, payload).await {
        Ok(Response::Ok(v)) => Ok(v),
        Ok(Response::Err { error }) => Err(from_api(doing, &error)),
        Err(e) => Err(from_request(doing, &e)),
    }
}

/// Call the JetStream API `subject` with an empty body (what `INFO` requests want).
pub async fn api_empty<T: DeserializeOwned>(
    client: &async_nats::Client,
    doing: &str,
    subject: String,
) -> Result<T> {
    let reply = client
        .request(format!("$JS.API.{subject}"), bytes::Bytes::new())
        .await
        .map_err(|e| {
            let kind = match e.kind() {
                async_nats::RequestErrorKind::TimedOut => ErrorKind::Timeout,
                async_nats::RequestErrorKind::NoResponders => ErrorKind::Connection,
                async_nats::RequestErrorKind::InvalidSubject => ErrorKind::Config,
                async_nats::RequestErrorKind::MaxPayloadExceeded => ErrorKind::InvalidData,
                async_nats::RequestErrorKind::Other => ErrorKind::Connection,
            };
            Error::new(kind, format!("{doing}: {e}"))
        })?;
    match serde_json::from_slice::<Response<T>>(&reply.payload) {
        Ok(Response::Ok(v)) => Ok(v),
        Ok(Response::Err { error }) => Err(from_api(doing, &error)),
        Err(e) => Err(Error::new(
            ErrorKind::InvalidData,
            format!("{doing}: unreadable answer: {e}"),
        )),
    }
}

/// Whether an error says the thing is not there (a stream, consumer or message).
#[must_use]
pub fn is_not_found(e: &Error) -> bool {
    e.kind() == ErrorKind::NotFound
}
