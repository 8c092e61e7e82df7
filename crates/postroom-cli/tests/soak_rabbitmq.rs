//! The short soak on PostgreSQL + RabbitMQ with a broker restart (`rabbitmqctl stop_app` /
//! `start_app`). Its own test binary, so the restart never overlaps another broker test.

mod common;

use common::{FreshPg, amqp, cleanup, ok, postroom};

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_rabbitmq_with_a_broker_restart() {
    let fresh = FreshPg::create("soakr").await;
    let db = fresh.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let url = amqp();
    let json = tokio::task::spawn_blocking(move || {
        ok(&postroom(
            &d,
            &[
                "soak",
                "--messages",
                "5000",
                "--kill-every",
                "2",
                "--database",
                &db,
                "--broker",
                &url,
                "--restart-broker",
                "--json",
                "s.json",
            ],
        ));
        std::fs::read(d.join("s.json")).unwrap()
    })
    .await
    .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(r["messages"], 5000);
    assert_eq!(r["lost"], 0);
    assert_eq!(r["duplicate_effects"], 0);
    assert_eq!(r["order_violations"], 0);
    assert_eq!(r["parked_unexpected"], 0);
    assert_eq!(r["broker_restarts"], 1);
    assert!(r["kills"].as_u64().unwrap() >= 1);
    fresh.drop_db().await;
    cleanup("postroom-soak.").await;
}
