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

/// Application code that applies many messages in one transaction (see
/// [`BatchConsumer`](crate::consumer::batch::BatchConsumer)).
///
/// Claim the batch's inbox rows in one statement (`inbox::claim_many`), apply the effects of
/// the new ones, commit, and return one result per message, in order:
/// - `Ok(results)`: the transaction committed. `Ok(Handled)` entries are acknowledged; an
///   `Err` entry is a message that was left out of the transaction (e.g. it failed
///   validation) and is retried or parked on its own.
/// - `Err(e)`: the transaction did not commit; nothing was applied. The consumer splits the
///   batch and tries the halves, down to single messages, so one poison message or one
///   transient failure does not retry or park its neighbours; each message keeps its own
///   retry budget and diagnostics.
#[async_trait]
pub trait BatchHandler: Send + Sync + 'static {
    /// Handle a batch (in the order the transport delivered it).
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError>;
}

#[async_trait]
impl<H: BatchHandler + ?Sized> BatchHandler for std::sync::Arc<H> {
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError> {
        (**self).handle_batch(batch).await
    }
}

/// Compile-time check that [`BatchHandler`] stays object safe.
#[allow(dead_code)]
fn _batch_handler_is_object_safe(_: &dyn BatchHandler) {}

/// Compile-time check that [`Handler`] stays object safe.
#[allow(dead_code)]
fn _handler_is_object_safe(_: &dyn Handler) {}
