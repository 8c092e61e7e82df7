//! # postroom
//!
//! Reliable asynchronous messaging for applications: a producer writes its business row and
//! an outbox row in one transaction; the relay publishes with broker confirmations; a
//! consumer applies the effect and claims the message id in its inbox in one transaction,
//! then acks; transient failures retry on a ladder of delays kept by the broker (or the
//! queue in tables); permanent ones are parked with their diagnostics.
//!
//! This crate is the one to depend on. [`Service`] wires a service from one place: the store
//! and the transport (from URLs, or objects the program opened), the retry policy declared
//! once (the broker's delay stages are made from its ladder, and a consumer whose ladder the
//! transport cannot keep is refused at start, naming both), the consumers with their
//! handlers, and the relay. [`Service::start`] returns once every consumer is attached;
//! [`Running::shutdown`] drains.
//!
//! Every kind of consumer is declared in one line with its handler:
//! - [`consumer::<T>`](consumer): one handler call and one transaction per message;
//! - [`batch_consumer::<T>`](batch_consumer): many messages per handler call (one
//!   transaction, one inbox statement), the subscription's prefetch derived from the batch
//!   size so that batches form; a failed batch is split down to the one message at fault;
//! - `.inbox_queue(InboxQueueMode { .. })` on a consumer (PostgreSQL): each delivery is
//!   stored in the database and acknowledged at once, and workers apply the stored rows —
//!   the broker's partitions and prefetch no longer bound the work in flight.
//!
//! Each runs on the service's retry ladder, parks into the store's parking lot (the service
//! ingests what the broker parked for each consumer it names), and reports its counters in
//! [`Running::stats`]. The relay is the claiming one ([`Service::relay`]) or, on PostgreSQL
//! with `wal_level = logical`, the WAL relay (`Service::relay_from_wal`), which reads the
//! outbox's inserts from the write-ahead log and writes nothing per message.
//!
//! Complete, runnable services, one per stack, each a producer, relay and consumer with the
//! inbox that exits 0 only when every message was applied exactly once (the test command
//! runs them against the real servers):
//!
//! | stack | example | run |
//! |---|---|---|
//! | SQLite only, no server | `examples/src/bin/sqlite.rs` | `cargo run -p postroom-examples --bin sqlite` |
//! | PostgreSQL + RabbitMQ | `examples/src/bin/postgres_rabbitmq.rs` | `cargo run -p postroom-examples --bin postgres_rabbitmq` |
//! | PostgreSQL + NATS JetStream | `examples/src/bin/postgres_nats.rs` | `cargo run -p postroom-examples --bin postgres_nats` |
//! | PostgreSQL + Amazon SQS | `examples/src/bin/postgres_sqs.rs` | `cargo run -p postroom-examples --bin postgres_sqs` |
//! | PostgreSQL + Kafka | `examples/src/bin/postgres_kafka.rs` | `cargo run -p postroom-examples --bin postgres_kafka` |
//!
//! Each bin wires one stack; the message and the handler to change live in
//! `examples/src/shop.rs`. The shape of each:
//!
//! ```no_run
//! use postroom::sqlite::{SqliteStore, inbox, outbox};
//! use postroom::{Contract, Envelope, Handled, HandlerError, Message, OutgoingMessage,
//!                RetryPolicy, Service, TypedHandler, async_trait};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct OrderCreated { order_id: String, qty: i64 }
//! impl Contract for OrderCreated { const TYPE: &'static str = "order.created"; }
//!
//! struct Reserve { store: SqliteStore }
//!
//! #[async_trait]
//! impl TypedHandler<OrderCreated> for Reserve {
//!     async fn handle(&self, m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
//!         let mut tx = self.store.begin().await?;
//!         if !inbox::claim(&mut tx, "inventory", m.id()).await? {
//!             return Ok(Handled::Duplicate);
//!         }
//!         sqlx::query("UPDATE stock SET reserved = reserved + ?").bind(m.data.qty)
//!             .execute(&mut *tx).await?;
//!         tx.commit().await?;
//!         Ok(Handled::Applied)
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let service = Service::builder()
//!     .database("app.db")                       // or postgres://…; .broker("amqp://…")
//!     .retry(RetryPolicy::default().ladder("1s,10s".parse()?).retries(3))
//!     .open().await?;
//! let store: SqliteStore = service.store::<SqliteStore>().unwrap().clone();
//! let running = service
//!     .consumer(postroom::consumer::<OrderCreated>("inventory", Reserve { store: store.clone() }))
//!     .relay()
//!     .start().await?;                          // consumers attached: ready
//!
//! // Producer: the business row and the outbox row in one transaction.
//! let env = Envelope::builder(OrderCreated::TYPE, "shop").aggregate("order", "o-1", 1)
//!     .data(serde_json::to_value(OrderCreated { order_id: "o-1".into(), qty: 2 })?).build();
//! let mut tx = store.begin().await?;
//! outbox::enqueue(&mut tx, &OutgoingMessage::from_envelope(&env, OrderCreated::TYPE)).await?;
//! tx.commit().await?;
//!
//! running.shutdown().await;                     // drains
//! # Ok(()) }
//! ```
//!
//! ## From a first service to production
//!
//! 1. **A first service, no server.** `Service::builder().database("app.db")`: a SQLite file
//!    holds the outbox, the inbox, the parking lot and the queue in tables that stands in for
//!    a broker. The example above is this service.
//! 2. **PostgreSQL.** `.database("postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/postroom/db-ca.pem")`
//!    (TLS through rustls; the password from the environment, never in code). Size the pool
//!    with [`ServiceBuilder::pool_size`]: each handler call in flight and the relay take a
//!    connection. [`ServiceBuilder::table_prefix`] names postroom's tables. The producer writes
//!    with `postroom::postgres::outbox::enqueue` in its own transaction.
//! 3. **A broker.** `.broker(url)` with `amqp://`/`amqps://` (RabbitMQ, whose topology needs
//!    the management plugin: `rabbitmq-plugins enable rabbitmq_management`), `nats://`/`tls://`
//!    (NATS JetStream), `sqs://` (Amazon SQS, credentials from the AWS chain) or `kafka://`
//!    (Kafka). Every name the service owns on the broker starts with
//!    [`ServiceBuilder::prefix`] (RabbitMQ's work exchange is `{prefix}.events`); each
//!    transport's settings, TLS and credentials are in its page under `docs/brokers/`, and a
//!    topology file ([`ServiceBuilder::topology`]) holds them beside the consumers' bindings.
//! 4. **Retries and parking.** [`ServiceBuilder::retry`] declares the ladder once; the broker's
//!    delay stages are made from it, and a consumer whose ladder the transport cannot keep is
//!    refused at start. What exhausts its budget, or cannot be decoded, is parked with its
//!    diagnostics; `postroom parking` and `postroom serve` search and redrive it.
//! 5. **Throughput.** A [`batch_consumer`] applies many messages in one transaction (its
//!    prefetch derived from the batch size); `.inbox_queue(..)` on PostgreSQL takes the
//!    broker's partitions and prefetch out of the bound on work in flight; the WAL relay
//!    (`Service::relay_from_wal`) publishes from the write-ahead log, writing nothing per
//!    message.
//! 6. **Ordering.** Messages of one aggregate (`Envelope::builder(..).aggregate(kind, id,
//!    version)`) are published and delivered in version order; a message without an aggregate
//!    is its own key and unordered. A scheduled send ([`OutgoingMessage::not_before`]) is
//!    unordered too.
//! 7. **Retention.** The relay purges published outbox rows after its retention
//!    (`RelayConfig::retention`, 24 h by default, through [`Service::relay_with`]), or deletes
//!    each row once confirmed with [`ServiceBuilder::delete_on_publish`] (PostgreSQL). Inbox
//!    rows are what recognises a repeat: purge them (`postroom::postgres::inbox::purge`) no
//!    sooner than the replay window (`postroom_core::inbox::DEFAULT_REPLAY_WINDOW`, 14 days);
//!    redrive refuses copies older than that unless forced.
//! 8. **Operating it.** [`Running::stats`] gives each consumer's counters, and
//!    [`Running::stack`] what the outbox still holds ([`Stack::outbox_pending`]) and what an
//!    inbox has applied ([`Stack::inbox_count`]). The `postroom` command line runs the relay
//!    daemon with its metrics and health endpoints and the web console (`docs/operations.md`).
/// The README's quickstart, compiled with the doc tests so that it keeps up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeQuickstart;

mod builder;
mod consumer;
pub mod registry;
mod running;
mod service;
mod stack;

pub use builder::ServiceBuilder;
#[cfg(feature = "postgres")]
pub use consumer::InboxQueueMode;
pub use consumer::{ConsumerSpec, batch_consumer, consumer};
pub use running::Running;
pub use service::Service;
pub use stack::Stack;

pub use postroom_core::stats::StatsSnapshot;
pub use postroom_core::typed::{Contract, Message, TypedHandler, typed};
pub use postroom_core::{
    BatchHandler, Envelope, EnvelopeDecoder, Error, ErrorClass, ErrorKind, ForeignFormat, Handled,
    Handler, HandlerError, Incoming, MessageId, NotBefore, Ordering, OutgoingMessage, RelayConfig,
    Result, RetryLadder, RetryPolicy, ScheduledMessage, Subscription, Transport, async_trait,
};

/// The broker- and database-free core: every type of the consumer and relay loops.
pub use postroom_core as core;

/// The embedded store (SQLite): outbox, inbox, parking lot and queue in one file.
#[cfg(feature = "sqlite")]
pub use postroom_sqlite as sqlite;

/// PostgreSQL: outbox, inbox, parking lot, queue in tables.
#[cfg(feature = "postgres")]
pub use postroom_postgres as postgres;

/// RabbitMQ: topology, confirming publisher, retry stages, parking queues.
#[cfg(feature = "rabbitmq")]
pub use postroom_rabbitmq as rabbitmq;

/// NATS JetStream: streams, durable pull consumers, delayed naks, parking streams.
#[cfg(feature = "nats")]
pub use postroom_nats as nats;

/// Amazon SQS: queues and DLQs, batched publishing, retries as visibility timeouts.
#[cfg(feature = "sqs")]
pub use postroom_sqs as sqs;

/// Kafka: the idempotent producer, consumer groups, retry stage topics, a parking topic.
#[cfg(feature = "kafka")]
pub use postroom_kafka as kafka;
