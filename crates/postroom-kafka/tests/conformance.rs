//! The shared conformance suite on Kafka (retry topics whose copies are held until due, a
//! parking topic ingested into the store), with SQLite as the store half. Runs unchanged.

mod common;

use common::TestKafka;
use postroom_kafka::KafkaTransport;
use postroom_testkit::stores::sqlite::SqliteFixture;
use postroom_testkit::{Backend, TransportFixture};
use std::sync::Arc;
use std::time::Duration;

async fn fresh() -> Backend {
    let kafka = TestKafka::new("1s,2s");
    let transport = KafkaTransport::new(kafka.config.clone()).expect("transport");
    Backend::new(
        Arc::new(SqliteFixture::fresh().await),
        TransportFixture {
            transport: Arc::new(transport),
            ladder: "1s,2s".parse().unwrap(),
            // A consumer that dies without leaving its group holds its partitions until its
            // session times out (10 s by default); the next member gets them after a rebalance.
            redelivery_after: Duration::from_secs(10),
            prefetch: 2,
        },
    )
    .keeping(kafka)
}

postroom_testkit::conformance_suite!(fresh().await);
