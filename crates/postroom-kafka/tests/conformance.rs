//! The shared conformance suite on Kafka (retry topics whose copies are held until due, a
//! parking topic ingested into the store), with SQLite as the store half, on both test
//! brokers: tansu and a mock cluster of three brokers. Runs unchanged.

mod common;

use common::TestKafka;
use postroom_testkit::Backend;
use std::time::Duration;

async fn on(kafka: TestKafka) -> Backend {
    let transport = kafka.transport(kafka.config.clone());
    // A consumer that dies without leaving its group holds its partitions until its session
    // times out (10 s by default); the next member gets them after a rebalance.
    Backend::on_sqlite(transport, "1s,2s", Duration::from_secs(10))
        .await
        .keeping(kafka)
}

mod on_tansu {
    use super::*;
    postroom_testkit::conformance_suite!(on(TestKafka::new("1s,2s")).await);
}

mod on_mock_cluster {
    use super::*;
    postroom_testkit::conformance_suite!(on(TestKafka::on_mock("1s,2s")).await);
}
