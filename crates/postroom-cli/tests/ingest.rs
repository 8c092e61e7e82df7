//! `postroom ingest` on RabbitMQ: a long-running process that moves each consumer's parked
//! copies from the broker's parking queue into the parking store as they come (a copy parked
//! while it runs, then another), with `/metrics` counting them and `/readyz` answering;
//! SIGTERM ends it cleanly.

mod common;

use common::daemon::{Daemon, get, on_broker, wait_for};
use common::parking::{ParkingPlace, Running, publish_corrupt};
use common::rabbit::RabbitWorkload;
use std::time::Duration;

async fn parked_count(pool: &sqlx::SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM postroom_parking")
        .fetch_one(pool)
        .await
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_moves_parked_copies_as_they_come_and_serves_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rabbit = RabbitWorkload::start(d, "i").await;
    let url = common::amqp();
    let ingest = Daemon::start(d, &on_broker("ingest", "p.db", &url, &[]), &[]);
    let ready = format!("{}/readyz", ingest.base);
    wait_for(Duration::from_secs(30), "ingest to be ready", async || {
        get(&ready).await.0 == 200
    })
    .await;

    // A real consumer parks corrupt messages into the parking queue while ingest runs.
    let running = Running::start(rabbit.subscriber(4));
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", d.join("p.db").display()))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 1..=2 {
        let id = publish_corrupt(rabbit.publisher.as_ref()).await;
        ids.push(id.to_string());
        wait_for(
            Duration::from_secs(60),
            "the parked copy in the store",
            || async { parked_count(&pool).await == n },
        )
        .await;
    }
    running.stop().await;
    let mut stored: Vec<String> = sqlx::query_scalar("SELECT message_id FROM postroom_parking")
        .fetch_all(&pool)
        .await
        .unwrap();
    stored.sort();
    ids.sort();
    assert_eq!(stored, ids);

    let (status, metrics) = get(&format!("{}/metrics", ingest.base)).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"postroom_parking_ingested_total{consumer="c"} 2"#),
        "{metrics}"
    );
    assert!(ingest.terminate(Duration::from_secs(30)).success());
    pool.close().await;
    rabbit.close().await;
}
