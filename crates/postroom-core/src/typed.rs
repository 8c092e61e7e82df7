//! Typed handlers: the payload as a Rust type instead of a JSON value.
//!
//! ```
//! use postroom_core::typed::{Contract, Message, TypedHandler, typed};
//! use postroom_core::{ConsumerConfig, Handled, HandlerError, async_trait};
//!
//! #[derive(serde::Deserialize)]
//! struct OrderCreated { order_id: String, qty: u32 }
//! impl Contract for OrderCreated { const TYPE: &'static str = "order.created"; }
//!
//! struct Reserve;
//! #[async_trait]
//! impl TypedHandler<OrderCreated> for Reserve {
//!     async fn handle(&self, m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
//!         assert!(m.data.qty > 0 || m.data.order_id.is_empty());
//!         Ok(Handled::Applied)
//!     }
//! }
//!
//! // The decoder accepts exactly the contract's type and versions.
//! let config = ConsumerConfig::for_contract::<OrderCreated>("inventory");
//! let handler = std::sync::Arc::new(typed(Reserve));
//! # let _ = postroom_core::Consumer::new(config, handler);
//! ```

use crate::envelope::{Envelope, MessageId};
use crate::handler::{Handler, Incoming};
use crate::message::Headers;
use crate::outcome::{Handled, HandlerError};
use async_trait::async_trait;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::ops::RangeInclusive;

/// A message type and the schema versions its Rust type reads.
pub trait Contract: DeserializeOwned + Send + Sync + 'static {
    /// The message type, e.g. `order.created`.
    const TYPE: &'static str;
    /// Schema versions this type decodes (others are parked as `unknown_schema_version`).
    const VERSIONS: RangeInclusive<u32> = 1..=1;
}

/// A decoded message with its typed payload.
#[derive(Clone, Debug)]
pub struct Message<T> {
    /// The payload.
    pub data: T,
    /// The envelope (id, aggregate, correlation, …); its `data` is the raw payload.
    pub envelope: Envelope,
    /// Retries already made (0 on the first delivery).
    pub attempt: u32,
    /// The transport's redelivery hint (diagnostics only).
    pub redelivered: bool,
    /// Headers.
    pub headers: Headers,
}

impl<T> Message<T> {
    /// The stable message id (the inbox key).
    #[must_use]
    pub fn id(&self) -> MessageId {
        self.envelope.id
    }
}

/// Application code taking a typed payload.
#[async_trait]
pub trait TypedHandler<T: Contract>: Send + Sync + 'static {
    /// Handle one message; see [`Handler`] for what the result means.
    async fn handle(&self, message: Message<T>) -> Result<Handled, HandlerError>;
}

/// A [`TypedHandler`] as a [`Handler`]: a payload that does not fit `T` is parked at once
/// (code `malformed_data`).
pub struct Typed<T, H> {
    inner: H,
    _contract: PhantomData<fn() -> T>,
}

/// Wrap a typed handler for the consumer loop.
pub fn typed<T: Contract, H: TypedHandler<T>>(handler: H) -> Typed<T, H> {
    Typed {
        inner: handler,
        _contract: PhantomData,
    }
}

#[async_trait]
impl<T: Contract, H: TypedHandler<T>> Handler for Typed<T, H> {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let data = m.envelope.data_as::<T>()?;
        self.inner
            .handle(Message {
                data,
                envelope: m.envelope.clone(),
                attempt: m.attempt,
                redelivered: m.redelivered,
                headers: m.headers.clone(),
            })
            .await
    }
}

impl crate::consumer::ConsumerConfig {
    /// Settings for a consumer of one contract: its decoder accepts exactly `T::TYPE` at
    /// `T::VERSIONS`.
    #[must_use]
    pub fn for_contract<T: Contract>(name: impl Into<String>) -> Self {
        Self::new(
            name,
            crate::decode::EnvelopeDecoder::accepting(T::TYPE, T::VERSIONS),
        )
    }
}
