//! # postroom-core
//!
//! The broker- and database-free heart of postroom: the message [`Envelope`], the closed
//! vocabulary of handler results ([`Handled`], [`HandlerError`], [`Disposition`]), the retry
//! budget ([`RetryPolicy`]), the aggregate version guard ([`ordering`]), the store and
//! transport traits, and the relay and consumer loops written once against them.
//!
//! Applications depend on the `postroom` crate, whose `Service` wires these loops to a store
//! and a transport; its `examples/` are complete services, one per stack.
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
pub mod config_file;
pub mod consumer;
pub mod debug;
pub mod decode;
pub mod driver;
pub mod envelope;
pub mod error;
pub mod failpoint;
pub mod handler;
pub mod inbox;
pub mod inbox_feed;
pub mod message;
pub mod metrics;
pub mod names;
pub mod ordering;
pub mod outbox;
pub mod outcome;
pub mod parking;
pub mod pattern;
pub mod relay;
pub mod retry;
pub mod schedule;
pub mod setters;
pub mod sql_store;
pub mod stats;
pub mod sync;
pub mod transport;
pub mod typed;

pub use consumer::{
    BatchConfig, BatchConsumer, BreakerConfig, CircuitBreaker, Consumer, ConsumerConfig, Ordering,
};
pub use decode::{DecodeError, EnvelopeDecoder, ForeignFormat};
pub use envelope::{Aggregate, Envelope, MessageId, TraceContext};
pub use error::{Error, ErrorClass, ErrorKind, Result};
pub use handler::{BatchHandler, Handler, Incoming};
pub use inbox::InboxLookup;
pub use inbox_feed::{FeedCounts, InboxFeed, run_feed};
pub use message::{Headers, OutgoingMessage, Route};
pub use outbox::{OutboxRecord, OutboxStore};
pub use outcome::{Disposition, Handled, HandlerError, ParkReason, RetryPlan};
pub use parking::{
    AuditEntry, AuditLog, ParkedMessage, ParkedStatus, ParkedSummary, ParkingArchive,
    ParkingFilter, ParkingIngest, ParkingQuery, ParkingStore, RedriveReport, RedriveRun,
    RedriveSkip, Redriver, RunControl, RunState, SkippedMessage,
};
pub use relay::{OutboxRelay, RelayConfig};
pub use retry::{RetryLadder, RetryPolicy};
pub use schedule::{NotBefore, ScheduledMessage};
pub use transport::{
    Backlog, BacklogProbe, BoxDelivery, BoxSubscriber, BrokerTopology, Capabilities,
    DelayCapability, Delivery, FanOutPublisher, KeyOrdering, PublishTarget, Publisher, QueueConfig,
    ReceivedMessage, RedeliveryCounting, Subscriber, Subscription, TopologyChange, Transport,
    refuse_conflicts,
};

// Re-exported so that stores and transports build the same types.
pub use async_trait::async_trait;
pub use chrono;
pub use serde_json;
