//! The shared conformance suite on RabbitMQ (ack+publish retries through TTL stage queues,
//! parking queues ingested into the store), with SQLite as the store half. Runs unchanged.

mod common;

use common::TestRabbit;
use postroom_testkit::stores::sqlite::SqliteFixture;
use postroom_testkit::{Backend, TransportFixture};
use std::sync::Arc;
use std::time::Duration;

async fn fresh() -> Backend {
    let rabbit = TestRabbit::new("1s,2s").await;
    // The work exchange exists before any consumer subscribes.
    rabbit.topology().apply().await.expect("apply");
    let transport = rabbit.transport();
    Backend::new(
        Arc::new(SqliteFixture::fresh().await),
        TransportFixture {
            transport: Arc::new(transport),
            ladder: "1s,2s".parse().unwrap(),
            redelivery_after: Duration::from_secs(1),
            prefetch: 2,
        },
    )
    .keeping(rabbit)
}

postroom_testkit::conformance_suite!(fresh().await);
