//! The short soak on PostgreSQL + RabbitMQ with a broker restart (`rabbitmqctl stop_app` /
//! `start_app`). Its own test binary, and in the `rabbitmq` test group (`.config/nextest.toml`),
//! so the restart never overlaps another broker test.

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
