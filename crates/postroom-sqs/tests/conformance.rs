//! The shared conformance suite on SQS (standard queues: retries as visibility timeouts, a
//! heartbeat while handlers run, DLQs ingested into the store), with SQLite as the store half.
//! Runs unchanged.

mod common;

use common::TestSqs;
use postroom_testkit::stores::sqlite::SqliteFixture;
use postroom_testkit::{Backend, TransportFixture};
use std::sync::Arc;
use std::time::Duration;

async fn fresh() -> Backend {
    let sqs = TestSqs::new().await;
    let transport = sqs.transport(sqs.config()).await;
    Backend::new(
        Arc::new(SqliteFixture::fresh().await),
        TransportFixture {
            transport,
            ladder: "1s,2s".parse().unwrap(),
            redelivery_after: Duration::from_secs(2),
            prefetch: 2,
        },
    )
    .keeping(sqs)
}

postroom_testkit::conformance_suite!(fresh().await);
