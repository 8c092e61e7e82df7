//! The source article's fault tests that need the business database (the shared scenarios),
//! on SQS: retries wait out visibility timeouts, the parked message comes from the
//! dead-letter queue.

mod common;

use common::TestSqs;
use postroom_testkit::cases::database_outage;

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
