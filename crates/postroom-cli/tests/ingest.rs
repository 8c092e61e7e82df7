//! `postroom ingest` on RabbitMQ: a long-running process that moves each consumer's parked
//! copies from the broker's parking queue into the parking store as they come (a copy parked
//! while it runs, then another), with `/metrics` counting them and `/readyz` answering;
//! SIGTERM ends it cleanly.

mod common;

use common::daemon::{Daemon, get, wait_for};
use common::{amqp, cleanup, management_api, workload};
use postroom_core::{
    Consumer, ConsumerConfig, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming, MessageId,
    OutgoingMessage, Publisher, Route, async_trait,
};
use std::sync::Arc;
use std::time::Duration;

/// Corrupt bodies are parked by the consumer loop before any handler runs.
struct Never;

#[async_trait]
impl Handler for Never {
    async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
        Err(HandlerError::permanent(
            "unexpected",
            "no body decodes here",
        ))
    }
}

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
    let prefix = workload("i");
    let toml = format!(
        "prefix = \"{prefix}\"\nexchange = \"{prefix}.orders\"\nladder = \"1s\"\n[[consumers]]\nname = \"c\"\nbindings = [\"t.#\"]\n"
    );
    std::fs::write(d.join("topology.toml"), &toml).unwrap();
    let config = postroom_rabbitmq::TopologyConfig::from_toml(&toml).unwrap();
    postroom_rabbitmq::Topology::new(config.clone(), management_api())
        .unwrap()
        .apply()
        .await
        .unwrap();
    let broker = postroom_rabbitmq::Broker::connect(&amqp()).await.unwrap();
    let publisher = Arc::new(postroom_rabbitmq::ConfirmingPublisher::new(
        broker.clone(),
        &config,
    ));
    let url = amqp();
    let ingest = Daemon::start(
        d,
        &[
            "ingest",
            "--database",
            "p.db",
            "--broker",
            &url,
            "--topology",
            "topology.toml",
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    let ready = format!("{}/readyz", ingest.base);
    wait_for(Duration::from_secs(30), "ingest to be ready", || {
        let ready = ready.clone();
        async move { get(&ready).await.0 == 200 }
    })
    .await;

    // A real consumer parks corrupt messages into the parking queue while ingest runs.
    let sub = postroom_rabbitmq::RabbitSubscriber::new(
        broker.clone(),
        publisher.clone(),
        &config,
        "c",
        postroom_rabbitmq::SubscriberOptions::new(4),
    )
    .unwrap();
    let consumer = Consumer::new(
        ConsumerConfig::new("c", EnvelopeDecoder::new()),
        Arc::new(Never),
    );
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move { consumer.run(sub, rx).await });
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", d.join("p.db").display()))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 1..=2 {
        let id = MessageId::new();
        ids.push(id.to_string());
        publisher
            .publish(&OutgoingMessage {
                id,
                route: Route::Topic("t.x".into()),
                headers: Default::default(),
                body: b"{oops".to_vec(),
            })
            .await
            .unwrap();
        wait_for(
            Duration::from_secs(60),
            "the parked copy in the store",
            || async { parked_count(&pool).await == n },
        )
        .await;
    }
    stop.send(true).unwrap();
    run.await.unwrap();
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
    broker.close().await;
    cleanup(&prefix).await;
}
