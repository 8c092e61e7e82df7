//! A complete postroom service on PostgreSQL and Kafka: a producer writes orders and their
//! outbox rows in one PostgreSQL transaction, the relay publishes them with Kafka's
//! idempotent producer (a delivery report is the confirm; the order's aggregate key is the
//! record key, so one order's messages stay in one partition, in order), and an inventory
//! consumer reserves stock through its inbox in PostgreSQL. The topics (the route's, one
//! retry topic per stage of the ladder declared once below, the parking topic) are made at
//! start; copies parked on the parking topic are moved into the parking lot in PostgreSQL.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//! KAFKA_URL=kafka://127.0.0.1:9092 \
//! cargo run -p postroom-examples --bin postgres_kafka
//! ```
//!
//! `KAFKA_URL` names one bootstrap broker; `?brokers=h2:9092,h3:9092` adds more, and
//! `?partitions=N&replication=N` say how the topics are made. Each run has topics and
//! consumer groups of its own (`shop-<run>.order.created`, group `shop-<run>.inventory`), so
//! reruns never read each other's records.
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
    let kafka = std::env::var("KAFKA_URL").unwrap_or_else(|_| "kafka://127.0.0.1:9092".into());
    let run = shop::run_id(); // this run's topics, groups and orders

    // One place: the store, the broker (its topics and groups under one prefix), the retry
    // ladder declared once; the shop adds the consumer and the relay.
    let service = Service::builder()
        .database(&database)
        .broker(&kafka)
        .prefix(&format!("shop-{run}"))
        .retry(RetryPolicy::default().ladder("1s,2s".parse()?).retries(3))
        .open()
        .await?;
    shop::run_on_postgres(service, &run, Copies::ReachTheInbox).await
}
