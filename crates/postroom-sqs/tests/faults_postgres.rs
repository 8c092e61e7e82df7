//! The source article's fault tests that need the business database, on SQS and PostgreSQL:
//! the handler claims the inbox row and applies the effect in one PostgreSQL transaction.
//! PostgreSQL "goes down" for the handler by cutting a TCP path to the real server (a loopback
//! forwarder this test owns), never by stopping the shared server.

mod common;

use common::{TestSqs, eventually, order};
use postroom_core::consumer::Consumer;
use postroom_core::parking::ingest::ingest_dead_letters;
use postroom_core::{
    ErrorClass, OutgoingMessage, ParkingFilter, ParkingStore, Subscription, Transport,
};
use postroom_testkit::running::{Running, spawn};
use postroom_testkit::servers::CuttablePath;
use postroom_testkit::stores::pg_effects::{PgEffect, PgEffectsDb, inventory_config};
use std::sync::Arc;
use std::time::Duration;

/// Subscribe `inventory` and run a consumer with `ladder` (as many retries as stages).
async fn run(transport: &postroom_sqs::SqsTransport, h: Arc<PgEffect>, ladder: &str) -> Running {
    let consumer =
        Consumer::for_transport(inventory_config(ladder), h, &transport.capabilities()).unwrap();
    let sub = transport
        .subscriber(&Subscription::new("inventory", &["order.created"]))
        .await
        .unwrap();
    spawn(consumer, sub)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_longer_than_the_budget_walks_the_visibility_ladder_then_parks() {
    let t = TestSqs::new().await;
    let transport = t.transport(t.config()).await;
    let db = PgEffectsDb::fresh().await;
    let path = CuttablePath::to_postgres().await;
    path.down();
    let h = db.handler(path.port);
    let Running { stop, task, stats } = run(&transport, h.clone(), "1s,2s").await;
    let env = order("down-1", 1);
    transport
        .publisher()
        .publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            !stats.snapshot().parked_by_code.is_empty()
        })
        .await,
        "parked"
    );
    // Nothing more arrives: no hot loop (longer than the visibility timeout).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop.send(true);
    task.await.unwrap();
    let calls = h.calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![0, 1, 2],
        "one receive per stage, then parked"
    );
    assert!(
        calls[1].1 - calls[0].1 >= Duration::from_secs(1),
        "1 s kept"
    );
    assert!(
        calls[2].1 - calls[1].1 >= Duration::from_secs(2),
        "2 s kept"
    );
    let (store, _dir) = sqlite_parking().await;
    let n = ingest_dead_letters(
        &*transport,
        "inventory",
        store.clone(),
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    assert_eq!(n, 1);
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.attempts, 3);
    assert_eq!(p.error_class, ErrorClass::Transient);
    assert!(
        ["connection", "timeout", "io"].contains(&p.error_code.as_str()),
        "{}",
        p.error_code
    );
    assert!(
        p.first_failure_at <= p.parked_at - chrono::Duration::seconds(2),
        "the first failure time is the first receive's, kept across the visibility retries"
    );
    path.restore();
    assert_eq!(db.effects("down-1").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_back_before_the_budget_ends_is_processed_once() {
    let t = TestSqs::new().await;
    let transport = t.transport(t.config()).await;
    let db = PgEffectsDb::fresh().await;
    let path = CuttablePath::to_postgres().await;
    path.down();
    let h = db.handler(path.port);
    let Running { stop, task, stats } = run(&transport, h.clone(), "1s,3s").await;
    let env = order("back-1", 1);
    transport
        .publisher()
        .publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(15), || async {
            h.calls.lock().unwrap().len() >= 2
        })
        .await,
        "two failed attempts"
    );
    path.restore();
    assert!(
        eventually(Duration::from_secs(20), || async {
            stats.snapshot().applied == 1
        })
        .await,
        "processed after recovery"
    );
    let _ = stop.send(true);
    task.await.unwrap();
    assert!(stats.snapshot().parked_by_code.is_empty());
    assert_eq!(db.effects("back-1").await, 1);
}

async fn sqlite_parking() -> (Arc<postroom_sqlite::SqliteStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = postroom_sqlite::SqliteStore::open(dir.path().join("p.db"))
        .await
        .unwrap();
    (Arc::new(store), dir)
}
