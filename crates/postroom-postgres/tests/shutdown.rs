//! The inbox-queue loops stop promptly when their shutdown sender is dropped (a lost handle
//! must not leave them spinning), and never cancel a receive halfway: a transport may be in
//! the middle of a store transaction or a fetch.

mod common;

use common::{Always, fresh_store};
use postroom_core::EnvelopeDecoder;
use postroom_core::consumer::ConsumerConfig;
use postroom_postgres::{InboxQueue, InboxQueueConfig, PgQueue};
use postroom_testkit::servers::TestDb;
use postroom_testkit::watched::{Receives, Watched};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;

async fn inbox_queue(store: &postroom_postgres::PgStore) -> InboxQueue {
    let mut consumer =
        ConsumerConfig::new("iq", EnvelopeDecoder::new().accept("order.created", 1..=1));
    consumer.handler_timeout = Duration::from_secs(1);
    let mut cfg = InboxQueueConfig::new(consumer);
    cfg.workers = 3;
    cfg.lease = Duration::from_secs(5);
    // A long receive, so that a shutdown arrives while one is in progress.
    cfg.poll_interval = Duration::from_secs(2);
    InboxQueue::new(store.pool().clone(), store.prefix().clone(), cfg).unwrap()
}

async fn watched_subscriber(
    store: &postroom_postgres::PgStore,
) -> (Watched<postroom_postgres::PgSubscriber>, Arc<Receives>) {
    let queue = store
        .queue(PgQueue::defaults().poll_interval(Duration::from_millis(50)))
        .unwrap();
    let receives = Arc::new(Receives::default());
    let sub = queue.subscribe("iq", &["order.*"]).await.unwrap();
    (
        Watched {
            inner: sub,
            receives: receives.clone(),
        },
        receives,
    )
}

/// A fresh store's inbox queue and a watched subscription for its ingest (keep the database
/// handle while they are used).
async fn inbox_queue_and_watched_subscriber() -> (
    TestDb,
    InboxQueue,
    Watched<postroom_postgres::PgSubscriber>,
    Arc<Receives>,
) {
    let (store, db) = fresh_store(4).await;
    let iq = inbox_queue(&store).await;
    let (sub, receives) = watched_subscriber(&store).await;
    (db, iq, sub, receives)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_stops_when_its_shutdown_sender_is_dropped() {
    let (_db, iq, sub, receives) = inbox_queue_and_watched_subscriber().await;
    let (stop, rx) = watch::channel(false);
    drop(stop);
    tokio::time::timeout(Duration::from_secs(10), iq.ingest(sub, rx))
        .await
        .expect("the ingest returns once its shutdown sender is gone");
    assert_eq!(receives.cancelled.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_shuts_down_without_cancelling_a_receive() {
    let (_db, iq, sub, receives) = inbox_queue_and_watched_subscriber().await;
    let (stop, rx) = watch::channel(false);
    let ingest = tokio::spawn(async move { iq.ingest(sub, rx).await });
    common::wait_until(Duration::from_secs(10), "a receive to start", async || {
        receives.started.load(Ordering::SeqCst) >= 1
    })
    .await;
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), ingest)
        .await
        .expect("the ingest stops within its receive's wait")
        .unwrap();
    assert_eq!(
        receives.cancelled.load(Ordering::SeqCst),
        0,
        "a receive was dropped halfway"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_stop_when_their_shutdown_sender_is_dropped() {
    let (store, _db) = fresh_store(4).await;
    let iq = inbox_queue(&store).await;
    let (stop, rx) = watch::channel(false);
    drop(stop);
    tokio::time::timeout(
        Duration::from_secs(10),
        iq.run_workers(Arc::new(Always::applied()), rx),
    )
    .await
    .expect("the workers return once their shutdown sender is gone");
}
