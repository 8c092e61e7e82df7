//! A fatal producer error loses nothing: librdkafka's mock cluster answers a produce request
//! with a sequence desynchronization (fatal for the idempotent producer, and not something a
//! real broker does on demand). The producer is replaced, the unconfirmed rows stay in the
//! outbox, the relay publishes them again with the same ids, and every row reaches the topic.

use postroom_core::{Envelope, OutboxRelay, Publisher, RelayConfig};
use postroom_kafka::{KafkaConfig, KafkaProducer};
use postroom_testkit::StoreFixture;
use postroom_testkit::stores::sqlite::SqliteFixture;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fatal_producer_error_loses_nothing() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("orders", 1, 1).expect("topic");
    let config = KafkaConfig::new(mock.bootstrap_servers());
    let producer = Arc::new(KafkaProducer::new(&config).expect("producer"));
    let store = Arc::new(SqliteFixture::fresh().await);
    let envelopes: Vec<Envelope> = (1..=30)
        .map(|v| {
            Envelope::builder("order.created", "fatal-test")
                .aggregate("order", format!("f{v}"), 1)
                .build()
        })
        .collect();
    for e in &envelopes[..10] {
        store.produce(e, "orders").await.unwrap();
    }
    let relay = OutboxRelay::new(
        store.outbox(),
        producer.clone() as Arc<dyn Publisher>,
        RelayConfig {
            relay_id: "r1".into(),
            batch_size: 10,
            retry_after: Duration::from_millis(100),
            ..RelayConfig::default()
        },
    );
    let first = relay.run_once().await.expect("pass");
    assert_eq!(first.published, 10, "a healthy producer confirms all");
    for e in &envelopes[10..] {
        store.produce(e, "orders").await.unwrap();
    }
    // The next produce request is answered with a sequence desynchronization at the head of
    // the partition: a fatal error for the idempotent producer.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
    );
    let hit = relay.run_once().await.expect("pass");
    assert!(hit.failed > 0, "the fatal error failed the batch: {hit:?}");
    assert!(
        producer.sessions_replaced() >= 1,
        "the producer was replaced"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.outbox().pending().await.unwrap() > 0 {
        assert!(Instant::now() < deadline, "the outbox did not drain");
        relay.run_once().await.expect("pass");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // Every id is on the topic (duplicates allowed, the inbox absorbs them).
    // Read back on this thread: the mock cluster stays here (it is not Send).
    let ids: HashSet<String> = {
        let consumer: BaseConsumer = config
            .client_config()
            .set("group.id", "check")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&["orders"]).unwrap();
        let mut ids = HashSet::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while ids.len() < 30 && Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                let (id, _) = postroom_kafka::headers::from_record(rdkafka::Message::headers(&m));
                if let Some(id) = id {
                    ids.insert(id.to_string());
                }
            }
        }
        ids
    };
    drop(mock);
    for e in &envelopes {
        assert!(ids.contains(&e.id.to_string()), "{} lost", e.aggregate.id);
    }
}
