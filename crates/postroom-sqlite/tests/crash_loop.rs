//! The table queue's lease against a consumer that dies: a handler slower than its lease is
//! refused when the consumer is built, and a message that kills its consumer on every
//! delivery is parked as a crash loop once its delivery count reaches the bound (the cases
//! are [`postroom_testkit::cases::crash_loop`]; its consumer processes are this test
//! binary); a consumer that stalled past its lease cannot ack a message another consumer has
//! taken since.

use postroom_core::{Delivery, ErrorKind, OutgoingMessage, Publisher, Transport};
use postroom_sqlite::{QueueConfig, SqliteQueue, SqliteStore};
use postroom_testkit::cases::crash_loop as case;
use postroom_testkit::cases::{next_within, order};
use postroom_testkit::stores::sqlite::SqliteFixture;
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(1);

fn queue_config() -> QueueConfig {
    SqliteQueue::defaults()
        .lease(LEASE)
        .poll_interval(Duration::from_millis(20))
}

#[tokio::test]
async fn a_handler_slower_than_its_lease_is_refused_at_start_up() {
    case::a_handler_slower_than_its_lease_is_refused_at_start_up(&SqliteFixture::fresh().await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop() {
    case::a_message_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop(
        SqliteFixture::fresh(),
    )
    .await;
}

/// A consumer stalls past its lease (a pause, a slow disk) and another consumer takes the
/// message: the stale holder's ack is refused and hands the delivery back, the message stays
/// for its new holder, whose ack removes it.
#[tokio::test]
async fn a_stale_lease_holders_ack_is_refused_once_another_took_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("q.db")).await.unwrap();
    let queue = store.queue_with(queue_config()).unwrap();
    let mut stale = queue.subscribe("leased", &["order.*"]).await.unwrap();
    let mut taker = queue.subscribe("leased", &["order.*"]).await.unwrap();
    let env = order("stale", 1);
    queue
        .publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    let before = Instant::now();
    let first = next_within(&mut stale, Duration::from_secs(20))
        .await
        .expect("delivered to the first consumer");
    // The second consumer gets it once the first one's lease has run out.
    let second = next_within(&mut taker, LEASE + Duration::from_secs(20))
        .await
        .expect("delivered again once the lease ran out");
    // The lease was taken after `before` (the table's clock counts whole milliseconds).
    assert!(
        before.elapsed() >= LEASE - Duration::from_millis(2),
        "taken over {:?} after the first claim, before its lease of {LEASE:?} ran out",
        before.elapsed()
    );
    assert_eq!(second.message().stable_id(), env.id);

    let (err, back) = match first.ack().await {
        Ok(()) => panic!("the stale holder's ack was accepted"),
        Err(handback) => handback,
    };
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
    assert!(err.to_string().contains("lease"), "{err}");
    assert_eq!(
        back.message().stable_id(),
        env.id,
        "the delivery is handed back"
    );
    let backlog = queue.backlog("leased").await.unwrap();
    assert_eq!(backlog.unacked, 1, "the new holder still has it");
    if let Err((e, _)) = second.ack().await {
        panic!("the new holder's ack failed: {e}");
    }
    let backlog = queue.backlog("leased").await.unwrap();
    assert_eq!(
        (backlog.ready, backlog.unacked, backlog.delayed),
        (0, 0, 0),
        "acked once, by its holder"
    );
    assert!(
        next_within(&mut stale, LEASE * 2).await.is_none(),
        "nothing comes back"
    );
}
