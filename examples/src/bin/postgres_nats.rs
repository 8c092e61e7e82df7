//! A complete postroom service on PostgreSQL and NATS JetStream: a producer writes orders and
//! their outbox rows in one PostgreSQL transaction, the relay publishes them to a JetStream
//! stream (confirmed by its PubAck, `Nats-Msg-Id` = the message id), and an inventory
//! consumer reserves stock through its inbox in PostgreSQL. Retries are naks carrying the
//! ladder's delay; copies JetStream gives up on are moved into the parking lot in PostgreSQL.
//! The transport is opened here by the program and handed to the service.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//! NATS_URL=nats://127.0.0.1:4222 \
//! cargo run -p postroom-examples --bin postgres_nats
//! ```
//!
//! This file opens the stack; the shop it runs, with the faults it injects, is in
//! `examples/src/shop.rs`. Of the messages sent a second time, JetStream drops a copy whose
//! `Nats-Msg-Id` it saw within its duplicate window (2 minutes by default); a copy sent later
//! reaches the consumer, and its inbox absorbs it. The program exits 0 only when every order
//! was applied exactly once; otherwise it says what went wrong and exits 1. To make it yours,
//! change `OrderCreated` and `Reserve::handle` in examples/src/shop.rs, and drop the two
//! marked fault injections there.

use postroom::nats::{NatsConfig, NatsConnection, NatsTransport};
use postroom::{RetryPolicy, Service};
use postroom_examples::shop::{self, Copies};
use std::process::ExitCode;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    shop::init_logging();
    let database = shop::postgres_url();
    let nats = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let connection = NatsConnection::connect(&nats, "shop-example").await?;
    // The stream and its durable consumers are made when the consumer binds.
    let transport = NatsTransport::new(connection, NatsConfig::new("shopexample"))?;

    // One place: the store, the transport, the retry ladder declared once; the shop adds the
    // consumer and the relay.
    let service = Service::builder()
        .database(&database)
        .transport(Arc::new(transport))
        .retry(RetryPolicy::default().ladder("1s,2s".parse()?).retries(3))
        .open()
        .await?;
    shop::run_on_postgres(service, &shop::run_id(), Copies::MayBeDroppedByTheStream).await
}
