//! The source article's fault tests that need the business database (the shared scenarios),
//! on NATS JetStream: retries are naks with the stage's delay, and the parked message comes
//! from the captured advisory.

mod common;

use common::TestNats;
use postroom_testkit::cases::database_outage;

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
