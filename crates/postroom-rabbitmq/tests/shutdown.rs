//! The parking ingest stops promptly when its shutdown sender is dropped, and never cancels a
//! receive halfway (the receive may be inside a fetch; the copy must stay with the broker or
//! reach the store, never be dropped in between).

mod common;

use common::{TestRabbit, eventually, sqlite};
use postroom_core::parking::ParkingIngest;
use postroom_core::{Result, Subscriber, Transport, async_trait};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Counts receives started, finished, and dropped before they finished.
#[derive(Default)]
struct Receives {
    started: AtomicUsize,
    cancelled: AtomicUsize,
}

/// A real subscriber, watched: a receive future dropped before it returned is counted.
struct Watched<S> {
    inner: S,
    receives: Arc<Receives>,
}

struct Unfinished(Option<Arc<Receives>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl<S: Subscriber> Subscriber for Watched<S> {
    type Delivery = S::Delivery;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<S::Delivery>> {
        self.receives.started.fetch_add(1, Ordering::SeqCst);
        let mut guard = Unfinished(Some(self.receives.clone()));
        let r = self.inner.next(max_wait).await;
        guard.0 = None;
        r
    }

    async fn close(&mut self) {
        self.inner.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parking_ingest_stops_on_shutdown_without_cancelling_a_receive() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("pi", &["order.created"]).await;
    let transport = t.transport();
    let (store, _dir) = sqlite().await;
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
    let t = TestRabbit::new("1s").await;
    t.add_consumer("pd", &["order.created"]).await;
    let transport = t.transport();
    let (store, _dir) = sqlite().await;
    let ingest = ParkingIngest::new("pd", store);
    let (stop, rx) = watch::channel(false);
    drop(stop);
    tokio::time::timeout(Duration::from_secs(10), ingest.run(&transport, rx))
        .await
        .expect("the ingest returns once its shutdown sender is gone");
}
