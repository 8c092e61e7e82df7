//! Bad input on the embedded store: clear errors, nothing lost.

use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::{
    EnvelopeDecoder, ErrorKind, Handled, Handler, HandlerError, Incoming, ParkingFilter,
    ParkingStore, Publisher, async_trait,
};
use postroom_sqlite::{SqliteQueue, SqliteStore};
use postroom_testkit::cases::raw_message;
use std::sync::Arc;
use std::time::Duration;

struct Never;
#[async_trait]
impl Handler for Never {
    async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
        panic!("an oversize message must not reach the handler")
    }
}

#[tokio::test]
async fn oversize_message_is_parked_whole_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("db")).await.unwrap();
    let queue = store.queue();
    let sub = queue.subscribe("c", &["big.#"]).await.unwrap();
    let body = vec![b'x'; 300 * 1024];
    let message = raw_message("big.one", body.clone());
    let id = message.id;
    queue.publish(&message).await.unwrap();
    let consumer = Consumer::new(
        ConsumerConfig::new("c", EnvelopeDecoder::new().accept("t", 1..=1)),
        Arc::new(Never),
    );
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move { consumer.run(sub, rx).await });
    let mut parked = Vec::new();
    for _ in 0..100 {
        parked = store.search(&ParkingFilter::default(), 10).await.unwrap();
        if !parked.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).unwrap();
    run.await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].message_id, id);
    assert_eq!(parked[0].error_code, "oversize");
    assert!(
        parked[0].error_message.contains("over the limit"),
        "{}",
        parked[0].error_message
    );
    assert_eq!(parked[0].body, body, "kept whole for the operator");
}

#[tokio::test]
async fn unwritable_path_and_not_a_database() {
    let err = SqliteStore::open("/nonexistent-dir/deeper/x.db")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("/nonexistent-dir/deeper"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    let err = SqliteStore::open(&junk).await.unwrap_err();
    assert!(err.to_string().contains("junk.db"), "{err}");
}

#[tokio::test]
async fn prefetch_zero_is_refused_and_unroutable_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("db")).await.unwrap();
    let q = store.queue();
    let err = store
        .queue_with(SqliteQueue::defaults().prefetch(0))
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Config);
    let err = postroom_core::Transport::subscribe(
        &q,
        &postroom_core::Subscription::new("c", &["a"]).prefetch(0),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err.kind(), ErrorKind::Config);
    let msg = raw_message("nobody.listens", []);
    assert_eq!(
        q.publish(&msg).await.unwrap_err().kind(),
        ErrorKind::Unroutable
    );
}
