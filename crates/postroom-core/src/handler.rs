//! The handler trait: the application's code, called once per decoded message.

use crate::envelope::Envelope;
use crate::message::Headers;
use crate::outcome::{Handled, HandlerError};
use async_trait::async_trait;

/// A decoded message handed to a [`Handler`].
#[derive(Clone, Debug)]
pub struct Incoming {
    /// The envelope.
    pub envelope: Envelope,
    /// Retries already made (0 on the first delivery).
    pub attempt: u32,
    /// The broker's redelivery hint (diagnostics only: use the inbox for correctness).
    pub redelivered: bool,
    /// Routing key / topic.
    pub routing_key: String,
    /// Headers.
    pub headers: Headers,
}

/// Application code. Apply the effect and claim the inbox row in one transaction, commit,
/// and return; the consumer acknowledges only after this returns `Ok`.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handle one message.
    async fn handle(&self, message: &Incoming) -> Result<Handled, HandlerError>;
}

#[async_trait]
impl<H: Handler + ?Sized> Handler for std::sync::Arc<H> {
    async fn handle(&self, message: &Incoming) -> Result<Handled, HandlerError> {
        (**self).handle(message).await
    }
}

/// Compile-time check that [`Handler`] stays object safe.
#[allow(dead_code)]
fn _handler_is_object_safe(_: &dyn Handler) {}
