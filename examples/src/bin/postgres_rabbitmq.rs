//! A complete postroom service on PostgreSQL and RabbitMQ: a producer writes orders and their
//! outbox rows in one PostgreSQL transaction, the relay publishes them to RabbitMQ with
//! confirms, and an inventory consumer reserves stock through its inbox in PostgreSQL. The
//! broker's topology (work queue, one delay queue per stage of the retry ladder, parking
//! queue) is made from the ladder declared once below; copies the broker dead-letters are
//! moved into the parking lot in PostgreSQL.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//! BROKER_URL=amqp://guest:guest@127.0.0.1:5672/%2f \
//! cargo run -p postroom-examples --bin postgres_rabbitmq
//! ```
//!
//! The management API (needed to set the delay queues' policies) is found on the broker's
//! host, port 15672, with the broker's user; `POSTROOM_BROKER_API` names another.
//!
//! This file opens the stack; the shop it runs, with the faults it injects, is in
//! `examples/src/shop.rs`. The program exits 0 only when every order was applied exactly
//! once; otherwise it says what went wrong and exits 1. To make it yours, change
//! `OrderCreated` and `Reserve::handle` in examples/src/shop.rs, and drop the two marked fault
//! injections there.

use postroom::{RetryPolicy, Service};
use postroom_examples::shop::{self, Copies};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    shop::init_logging();
    let database = shop::postgres_url();
    let broker = std::env::var("BROKER_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());

    // One place: the store, the broker (its names under one prefix), the retry ladder
    // declared once; the shop adds the consumer and the relay.
    let service = Service::builder()
        .database(&database)
        .broker(&broker)
        .prefix("shop-example")
        .retry(RetryPolicy::default().ladder("1s,2s".parse()?).retries(3))
        .open()
        .await?;
    shop::run_on_postgres(service, &shop::run_id(), Copies::ReachTheInbox).await
}
