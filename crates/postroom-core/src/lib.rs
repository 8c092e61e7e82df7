//! # postroom-core
//!
//! The broker- and database-free heart of postroom: the message [`Envelope`], the closed
//! vocabulary of handler results ([`Handled`], [`HandlerError`], [`Disposition`]), the retry
//! budget ([`RetryPolicy`]), the aggregate version guard ([`ordering`]), the store and
//! transport traits, and the relay and consumer loops written once against them.
//!
//! ```
//! use postroom_core::{Envelope, EnvelopeDecoder, RetryPolicy, ErrorClass, Disposition};
//! use postroom_core::retry::Attempt;
//!
//! let env = Envelope::builder("order.created", "orders")
//!     .aggregate("order", "o-1", 1)
//!     .data(serde_json::json!({"sku": "A", "qty": 1}))
//!     .build();
//! let decoded = EnvelopeDecoder::new().accept("order.created", 1..=1).decode(&env.to_bytes()).unwrap();
//! assert_eq!(decoded.id, env.id);
//!
//! // A transient failure on the first delivery: retry at stage 0 (5 s, plus jitter).
//! let policy = RetryPolicy::default();
//! let now = chrono::Utc::now();
//! let d = policy.decide(&Attempt { attempt: 0, occurred_at: Some(now), now, class: ErrorClass::Transient,
//!                                  code: "db_down", message: "connection refused" }, 0.0);
//! assert!(matches!(d, Disposition::Retry(ref r) if r.stage == 0 && r.delay.as_secs() == 5));
//! ```

pub mod backoff;
pub mod boxed;
pub mod breaker;
pub mod consumer;
pub mod decode;
pub mod envelope;
pub mod error;
pub mod handler;
pub mod message;
pub mod metrics;
pub mod ordering;
pub mod outbox;
pub mod outcome;
pub mod parking;
pub mod redrive;
pub mod relay;
pub mod retry;
pub mod stats;
pub mod transport;

pub use breaker::{BreakerConfig, CircuitBreaker};
pub use consumer::{Consumer, ConsumerConfig};
pub use decode::{DecodeError, EnvelopeDecoder};
pub use envelope::{Aggregate, Envelope, MessageId, TraceContext};
pub use error::{Error, ErrorClass, ErrorKind, Result};
pub use handler::{Handler, Incoming};
pub use message::{Headers, OutgoingMessage, Route};
pub use outbox::{OutboxRecord, OutboxStore};
pub use outcome::{Disposition, Handled, HandlerError, ParkReason, RetryPlan};
pub use parking::{ParkedMessage, ParkedStatus, ParkingFilter, ParkingStore, RedriveRun};
pub use redrive::Redriver;
pub use relay::{OutboxRelay, RelayConfig};
pub use retry::{RetryLadder, RetryPolicy};
pub use transport::{Backlog, BacklogProbe, Delivery, Publisher, ReceivedMessage, Subscriber};

// Re-exported so that stores and transports build the same types.
pub use async_trait::async_trait;
pub use chrono;
pub use serde_json;
