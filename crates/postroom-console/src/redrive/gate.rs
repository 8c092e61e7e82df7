//! The publisher a console's redrive run goes through: it waits while the run is paused,
//! refuses once it is cancelled, and substitutes an operator's edited body for a message
//! being edited and redriven. The redrive itself stays the core's [`Redriver`]: the rate,
//! the order and the bookkeeping of what was sent back are its own.
//!
//! [`Redriver`]: postroom_core::Redriver

use postroom_core::{Error, ErrorKind, MessageId, OutgoingMessage, Publisher, Result, async_trait};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;

/// What the operator asked of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Go on.
    Open,
    /// Wait before the next message.
    Paused,
    /// Stop before the next message.
    Cancelled,
}

/// Message of the error a cancelled run stops with.
pub const CANCELLED: &str = "redrive run cancelled by an operator";

/// A publisher gated by a [`Gate`].
pub struct GatedPublisher {
    inner: Arc<dyn Publisher>,
    gate: watch::Receiver<Gate>,
    bodies: HashMap<MessageId, Vec<u8>>,
}

impl GatedPublisher {
    /// Gate `inner` with `gate`, replacing the bodies of the messages in `bodies`.
    #[must_use]
    pub fn new(
        inner: Arc<dyn Publisher>,
        gate: watch::Receiver<Gate>,
        bodies: HashMap<MessageId, Vec<u8>>,
    ) -> Self {
        Self {
            inner,
            gate,
            bodies,
        }
    }
}

#[async_trait]
impl Publisher for GatedPublisher {
    async fn publish(&self, message: &OutgoingMessage) -> Result<()> {
        let mut gate = self.gate.clone();
        loop {
            let now = *gate.borrow_and_update();
            match now {
                Gate::Open => break,
                Gate::Cancelled => return Err(Error::new(ErrorKind::Closed, CANCELLED)),
                Gate::Paused => {
                    if gate.changed().await.is_err() {
                        return Err(Error::new(ErrorKind::Closed, CANCELLED));
                    }
                }
            }
        }
        match self.bodies.get(&message.id) {
            Some(body) => {
                let mut edited = message.clone();
                edited.body.clone_from(body);
                self.inner.publish(&edited).await
            }
            None => self.inner.publish(message).await,
        }
    }
}
