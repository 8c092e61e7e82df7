//! A complete postroom service on PostgreSQL and Amazon SQS: a producer writes orders and
//! their outbox rows in one PostgreSQL transaction, the relay publishes them to SQS in
//! batches, and an inventory consumer reserves stock through its inbox in PostgreSQL. The
//! consumer's work queue and its dead-letter queue are made from the consumers at start; a
//! retry hides the message for the ladder's delay (its visibility timeout), and copies SQS
//! moves to the dead-letter queue are moved into the parking lot in PostgreSQL.
//!
//! ```sh
//! AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… AWS_REGION=us-east-1 \
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//! SQS_URL=sqs://127.0.0.1:5000 \
//! cargo run -p postroom-examples --bin postgres_sqs
//! ```
//!
//! `SQS_URL` says where SQS is, never who you are: `sqs://` alone is AWS (or
//! `AWS_ENDPOINT_URL`), `sqs://sqs.eu-west-1.amazonaws.com` a regional endpoint,
//! `sqs://127.0.0.1:5000` a local one over plain HTTP, `?region=` overrides `AWS_REGION`.
//! Credentials come from the standard AWS environment (keys, a profile or a role). Each run
//! makes queues of its own (`shop-<run>-inventory`, `shop-<run>-inventory-dlq`), so reruns
//! never read each other's messages.
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
    let sqs = std::env::var("SQS_URL").unwrap_or_else(|_| "sqs://127.0.0.1:5000".into());
    let run = shop::run_id(); // this run's queues and orders

    // One place: the store, the broker (its queues under one prefix), the retry ladder
    // declared once; the shop adds the consumer and the relay.
    let service = Service::builder()
        .database(&database)
        .broker(&sqs)
        .prefix(&format!("shop-{run}"))
        .retry(RetryPolicy::default().ladder("1s,2s".parse()?).retries(3))
        .open()
        .await?;
    shop::run_on_postgres(service, &run, Copies::ReachTheInbox).await
}
