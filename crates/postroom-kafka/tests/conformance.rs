//! The shared conformance suite on Kafka (retry topics whose copies are held until due, a
//! parking topic ingested into the store), with SQLite as the store half. Runs unchanged.

mod common;

use common::TestKafka;
use postroom_kafka::KafkaTransport;
use postroom_testkit::Backend;
use std::sync::Arc;
use std::time::Duration;

async fn fresh() -> Backend {
    let kafka = TestKafka::new("1s,2s");
    let transport = KafkaTransport::new(kafka.config.clone()).expect("transport");
    // A consumer that dies without leaving its group holds its partitions until its session
    // times out (10 s by default); the next member gets them after a rebalance.
    Backend::on_sqlite(Arc::new(transport), "1s,2s", Duration::from_secs(10))
        .await
        .keeping(kafka)
}

postroom_testkit::conformance_suite!(fresh().await);
