//! The short soaks on PostgreSQL + RabbitMQ: with a broker restart (`rabbitmqctl stop_app` /
//! `start_app`), and with the batched consumer. Their own test binary, run alone
//! (`.config/nextest.toml`), so the restart never overlaps another broker test.

mod common;

use common::{TestDb, broker_soak, check_broker_soak, cleanup, workload};

/// The short soak on a database of its own and RabbitMQ, a kill every 2 s, for a workload
/// named after `tag` with `extra` flags: its summary, checked as every broker soak's, once
/// the workload's queues and exchanges are deleted.
async fn soak_on_rabbitmq(tag: &str, extra: &[&str]) -> serde_json::Value {
    let db = TestDb::create().await;
    let prefix = workload(tag);
    let r = broker_soak(&db.url, &common::amqp(), &prefix, "2", extra).await;
    check_broker_soak(&r);
    cleanup(&format!("{prefix}.")).await;
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_rabbitmq_with_a_broker_restart() {
    let r = soak_on_rabbitmq("soak", &["--restart-broker"]).await;
    assert_eq!(r["broker_restarts"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_rabbitmq_with_the_batched_consumer_and_kills() {
    let r = soak_on_rabbitmq("soakb", &["--batch-size", "32"]).await;
    assert_eq!(r["batch_size"], 32);
    let largest = r["largest_batch"].as_u64().unwrap();
    assert!(
        (2..=32).contains(&largest),
        "inventory transactions applied batches of more than one message, none over 32: {r}"
    );
}
