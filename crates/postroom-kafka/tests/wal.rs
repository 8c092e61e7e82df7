//! The WAL relay to Kafka (idempotent producer, `acks=all`): the relay dying between confirm
//! and the slot's advance, the database killed mid-stream, a short soak.

mod common;

use common::TestKafka;
use postroom_kafka::KafkaTransport;
use std::sync::Arc;

async fn fresh() -> (Arc<dyn postroom_core::Transport>, TestKafka) {
    let kafka = TestKafka::new("1s,2s");
    let transport = KafkaTransport::new(kafka.config.clone()).expect("transport");
    (Arc::new(transport), kafka)
}

postroom_testkit::wal_relay_suite!(fresh().await);
