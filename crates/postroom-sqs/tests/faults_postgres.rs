//! The source article's fault tests that need the business database (the shared scenarios),
//! on SQS: retries wait out visibility timeouts, the parked message comes from the
//! dead-letter queue.

mod common;

use common::TestSqs;
use postroom_testkit::cases::{breaker, database_outage};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_longer_than_the_budget_walks_the_visibility_ladder_then_parks() {
    let t = TestSqs::new().await;
    let transport = t.transport(t.config()).await;
    database_outage::postgres_down_longer_than_the_budget_walks_every_stage_then_parks(transport)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_back_before_the_budget_ends_is_processed_once() {
    let t = TestSqs::new().await;
    let transport = t.transport(t.config()).await;
    database_outage::postgres_back_before_the_budget_ends_is_processed_once(transport).await;
}

/// The default circuit breaker while the handler's database (a PostgreSQL cluster of the
/// test's own) is SIGKILLed and started again: it opens, and every message is applied once
/// after (retries wait out an 8 s visibility timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_breaker_opens_while_the_database_is_down_and_every_message_is_processed_after() {
    let t = TestSqs::new().await;
    // Longer than the scenario's handler timeout (10 s).
    let config = postroom_sqs::TopologyConfig {
        visibility_timeout: std::time::Duration::from_secs(15),
        ..t.config()
    };
    let transport = t.transport(config).await;
    breaker::default_breaker_rides_out_a_database_outage(transport, "brk").await;
}
