//! The short soak on PostgreSQL + Kafka: 5,000 messages over two partitions while consumers
//! and relays are SIGKILLed every 20 s (a consumer killed after its commit and before its offset
//! was stored must leave one effect). Kills are further apart than on RabbitMQ: a SIGKILLed
//! member holds its partitions until its session times out (10 s) and every kill and restart
//! is a group rebalance (seconds on the test broker), so a kill every 2 s kept the group
//! rebalancing without end (a few effects a second). The broker is not restarted: the test broker keeps everything in
//! memory, and a restart would lose the topics.

mod common;

use common::{TestDb, broker_soak, check_broker_soak, kafka, kafka_cleanup, workload};

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_kafka_with_killed_consumers() {
    let db = TestDb::create().await;
    let prefix = workload("soak");
    let broker = format!("{}?partitions=2", kafka());
    // Kafka keeps order within a partition only: an order's `order.cancelled` (version 2) can
    // be read long before its `order.created` (version 1) when the created topic has the
    // longer backlog, and the version guard retries it until version 1 is applied. The retry
    // budget must outlast that lag, so the ladder is longer than the soak's default.
    let r = broker_soak(
        &db.url,
        &broker,
        &prefix,
        "20",
        &["--ladder", "5s,30s,1m", "--timeout-secs", "900"],
    )
    .await;
    check_broker_soak(&r);
    assert_eq!(r["broker_restarts"], 0);
    kafka_cleanup(&format!("{prefix}.")).await;
}
