//! The source article's fault tests that need the business database (the shared scenarios),
//! on NATS JetStream: retries are naks with the stage's delay, and the parked message comes
//! from the captured advisory.

mod common;

use common::TestNats;
use postroom_testkit::cases::{breaker, database_outage};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_longer_than_the_budget_walks_every_stage_then_parks() {
    let t = TestNats::new().await;
    let transport = t.transport(t.config());
    database_outage::postgres_down_longer_than_the_budget_walks_every_stage_then_parks(transport)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_back_before_the_budget_ends_is_processed_once() {
    let t = TestNats::new().await;
    let transport = t.transport(t.config());
    database_outage::postgres_back_before_the_budget_ends_is_processed_once(transport).await;
}

/// The default circuit breaker while the handler's database (a PostgreSQL cluster of the
/// test's own) is SIGKILLed and started again: it opens, and every message is applied once
/// after (retries as naks with the 8 s stage's delay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_breaker_opens_while_the_database_is_down_and_every_message_is_processed_after() {
    let t = TestNats::new().await;
    breaker::default_breaker_rides_out_a_database_outage(t.transport(t.config()), "brk").await;
}
