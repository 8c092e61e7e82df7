//! The parking ingest stops promptly when its shutdown sender is dropped, and never cancels a
//! receive halfway (the receive may be inside a fetch; the copy must stay with the broker or
//! reach the store, never be dropped in between).

mod common;

use common::{eventually, parking_workload};
use postroom_core::Transport;
use postroom_core::parking::ParkingIngest;
use postroom_testkit::watched::{Receives, Watched};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parking_ingest_stops_on_shutdown_without_cancelling_a_receive() {
    let (t, store, _dir, _) = parking_workload("pi").await;
    let transport = t.transport();
    let receives = Arc::new(Receives::default());
    let mut sub = Watched {
        inner: transport
            .dead_letters("pi")
            .await
            .unwrap()
            .expect("RabbitMQ has a parking queue"),
        receives: receives.clone(),
    };
    let ingest = ParkingIngest::new("pi", store.clone());

    // A shutdown that arrives while a receive waits: the receive finishes its short wait.
    let (stop, rx) = watch::channel(false);
    let drain = {
        let receives = receives.clone();
        async move {
            let stored = ingest.drain(&mut sub, Duration::MAX, &rx).await;
            (stored, receives)
        }
    };
    let task = tokio::spawn(drain);
    assert!(
        eventually(Duration::from_secs(10), || async {
            receives.started.load(Ordering::SeqCst) >= 1
        })
        .await,
        "a receive started"
    );
    stop.send(true).unwrap();
    let (stored, receives) = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the ingest stops within its receive's wait")
        .unwrap();
    assert_eq!(stored.unwrap(), 0);
    assert_eq!(
        receives.cancelled.load(Ordering::SeqCst),
        0,
        "a receive was dropped halfway"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parking_ingest_stops_when_its_shutdown_sender_is_dropped() {
    let (t, store, _dir, _) = parking_workload("pd").await;
    let transport = t.transport();
    let ingest = ParkingIngest::new("pd", store);
    let (stop, rx) = watch::channel(false);
    drop(stop);
    tokio::time::timeout(Duration::from_secs(10), ingest.run(&transport, rx))
        .await
        .expect("the ingest returns once its shutdown sender is gone");
}
