//! The shared conformance suite on SQS (standard queues: retries as visibility timeouts, a
//! heartbeat while handlers run, DLQs ingested into the store), with SQLite as the store half.
//! Runs unchanged.

mod common;

use common::TestSqs;
use postroom_testkit::Backend;
use std::time::Duration;

async fn fresh() -> Backend {
    let sqs = TestSqs::new().await;
    let transport = sqs.transport(sqs.config()).await;
    Backend::on_sqlite(transport, "1s,2s", Duration::from_secs(2))
        .await
        .keeping(sqs)
}

postroom_testkit::conformance_suite!(fresh().await);
