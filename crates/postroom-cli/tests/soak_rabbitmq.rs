//! The short soaks on PostgreSQL + RabbitMQ: with a broker restart (`rabbitmqctl stop_app` /
//! `start_app`), and with the batched consumer. Their own test binary, run alone
//! (`.config/nextest.toml`), so the restart never overlaps another broker test.

mod common;

use common::{TestDb, broker_soak, check_broker_soak, cleanup, workload};

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_rabbitmq_with_a_broker_restart() {
    let db = TestDb::create().await;
    let prefix = workload("soak");
    let r = broker_soak(
        &db.url,
        &common::amqp(),
        &prefix,
        "2",
        &["--restart-broker"],
    )
    .await;
    check_broker_soak(&r);
    assert_eq!(r["broker_restarts"], 1);
    cleanup(&format!("{prefix}.")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_rabbitmq_with_the_batched_consumer_and_kills() {
    let db = TestDb::create().await;
    let prefix = workload("soakb");
    let r = broker_soak(
        &db.url,
        &common::amqp(),
        &prefix,
        "2",
        &["--batch-size", "32"],
    )
    .await;
    check_broker_soak(&r);
    assert_eq!(r["batch_size"], 32);
    let largest = r["largest_batch"].as_u64().unwrap();
    assert!(
        (2..=32).contains(&largest),
        "inventory transactions applied batches of more than one message, none over 32: {r}"
    );
    cleanup(&format!("{prefix}.")).await;
}
