//! The shared conformance suite on RabbitMQ (ack+publish retries through TTL stage queues,
//! parking queues ingested into the store), with SQLite as the store half. Runs unchanged.

mod common;

use common::TestRabbit;
use postroom_testkit::Backend;
use std::sync::Arc;
use std::time::Duration;

async fn fresh() -> Backend {
    let rabbit = TestRabbit::new("1s,2s").await;
    // The work exchange exists before any consumer subscribes.
    rabbit.topology().apply().await.expect("apply");
    let transport = rabbit.transport();
    Backend::on_sqlite(Arc::new(transport), "1s,2s", Duration::from_secs(1))
        .await
        .keeping(rabbit)
}

postroom_testkit::conformance_suite!(fresh().await);
