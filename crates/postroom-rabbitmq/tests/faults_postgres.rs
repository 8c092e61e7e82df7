//! The source article's fault tests that need the business database, on RabbitMQ and
//! PostgreSQL. The handler claims the inbox row and applies the effect in one PostgreSQL
//! transaction. PostgreSQL "goes down" for the handler by cutting a TCP path to the real
//! server (a loopback forwarder this test owns), never by stopping the shared server. The
//! server is the one `POSTROOM_TEST_PG` names, as in every other test.

mod common;

use common::{TestRabbit, eventually, publish_order};
use postroom_core::consumer::Consumer;
use postroom_core::failpoint::{self, Action};
use postroom_testkit::cases::database_outage;
use postroom_testkit::running::{Running, spawn};
use postroom_testkit::servers::CuttablePath;
use postroom_testkit::stores::pg_effects::{PgEffectsDb, inventory_config};
use std::sync::Arc;
use std::time::Duration;

/// A workload on `ladder` whose `inventory` consumer takes `order.created`.
async fn inventory_workload(ladder: &str) -> TestRabbit {
    let rabbit = TestRabbit::new(ladder).await;
    rabbit.add_consumer("inventory", &["order.created"]).await;
    rabbit
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_longer_than_the_budget_walks_every_stage_then_parks() {
    let rabbit = inventory_workload("1s,2s").await;
    database_outage::postgres_down_longer_than_the_budget_walks_every_stage_then_parks(Arc::new(
        rabbit.transport(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_back_before_the_budget_ends_is_processed_once() {
    let rabbit = inventory_workload("1s,3s").await;
    database_outage::postgres_back_before_the_budget_ends_is_processed_once(Arc::new(
        rabbit.transport(),
    ))
    .await;
}

/// The library's own retry path: the handler fails (PostgreSQL is unreachable), the consumer
/// publishes the retry copy and gets its confirm, and the connection dies at the crash point
/// between that confirm and the ack of the original (PostgreSQL is back by then). The broker
/// delivers the unacked original again and, a stage later, the retry copy: one effect, one
/// duplicate absorbed by the inbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_published_but_original_ack_lost_gives_one_effect() {
    // What the link and the consumer did is printed with a failure (the reconnect path).
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("warn,postroom_rabbitmq=debug,postroom_core=info")
        .try_init();
    let rabbit = inventory_workload("1s").await;
    let db = PgEffectsDb::fresh().await;
    let path = Arc::new(CuttablePath::to_postgres().await);
    path.down();
    // The connection the consumer will use, as the broker names it: found before the message
    // goes out (the management API lists a new connection only after a while), so the crash
    // point closes it at once, before the retry copy's delay ends.
    let listed_by = std::time::Instant::now() + Duration::from_secs(30);
    let connections = loop {
        let named = rabbit
            .api
            .connections_named(&rabbit.prefix)
            .await
            .unwrap_or_default();
        if !named.is_empty() {
            break named;
        }
        assert!(
            std::time::Instant::now() < listed_by,
            "the management API lists the workload's connection"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (api, heal) = (rabbit.api.clone(), path.clone());
    failpoint::arm_for(
        failpoint::RETRY_BEFORE_ACK,
        "inventory",
        Action::Call(Arc::new(
            move || -> futures::future::BoxFuture<'static, ()> {
                let (api, heal, connections) = (api.clone(), heal.clone(), connections.clone());
                Box::pin(async move {
                    heal.restore();
                    // The broker closes the connection the original came on before its ack
                    // is sent.
                    let mut closed = 0;
                    for c in &connections {
                        closed += usize::from(api.close_connection(c).await.unwrap_or(false));
                    }
                    assert!(
                        closed >= 1,
                        "the consumer's connection was closed by the broker"
                    );
                })
            },
        )),
        0,
        Some(1),
    );
    let h = db.handler(path.port);
    let publisher = rabbit.publisher();
    let Running { stop, task, stats } = spawn(
        Consumer::new(inventory_config("1s"), h.clone()),
        rabbit.subscriber("inventory", 4, publisher.clone()),
    );
    publish_order(publisher.as_ref(), "lost-ack-1").await;
    // Bounded by the link's own bounds (a setup request unanswered for 10 s is dropped and
    // made again, the reconnect backoff), not by how quickly the broker usually answers.
    assert!(
        eventually(Duration::from_secs(60), || async {
            let s = stats.snapshot();
            s.applied + s.duplicates >= 2
        })
        .await,
        "the original and the retry copy both delivered after the lost ack: {:?}, calls {:?}, crash point hits {}",
        stats.snapshot(),
        h.calls.lock().unwrap(),
        failpoint::hits(failpoint::RETRY_BEFORE_ACK, "inventory")
    );
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the consumer loop stops")
        .expect("the consumer loop ends without a panic");
    assert_eq!(
        failpoint::hits(failpoint::RETRY_BEFORE_ACK, "inventory"),
        1,
        "the library's retry path ran once: copy confirmed, then the ack lost"
    );
    let s = stats.snapshot();
    assert!(
        s.settle_failures <= 1,
        "at most the ack of the original failed (the broker may drop it silently)"
    );
    assert_eq!(
        (s.applied, s.duplicates),
        (1, 1),
        "one effect, one absorbed: {s:?}, calls (attempt, at) {:?}",
        h.calls.lock().unwrap()
    );
    let mut attempts: Vec<u32> = h.calls.lock().unwrap().iter().map(|c| c.0).collect();
    attempts.sort_unstable();
    assert_eq!(
        attempts,
        vec![0, 0, 1],
        "the failed attempt, the original again, the retry copy"
    );
    assert_eq!(db.effects("lost-ack-1").await, 1);
}
