//! The confirming publisher against the real broker: a basic.return is a failure even
//! though a positive confirm follows; a nack is a failure; a pipelined batch gets one
//! result per message, each its own.

mod common;

use common::TestRabbit;
use postroom_core::{ErrorKind, OutgoingMessage, Publisher, Route};
use postroom_rabbitmq::management::PolicyInfo;
use postroom_testkit::cases::raw_message;
use std::time::{Duration, Instant};

/// Whether `consumer`'s work queue holds exactly `n` messages within 15 s.
async fn work_queue_holds(t: &TestRabbit, consumer: &str, n: u64) -> bool {
    let queue = t.cfg().names(consumer).work_queue;
    common::eventually(Duration::from_secs(15), || async {
        t.queue_messages(&queue).await == n
    })
    .await
}

fn msg(topic: &str, n: usize) -> OutgoingMessage {
    raw_message(topic, format!("{{\"n\":{n}}}"))
}

#[tokio::test]
async fn unroutable_mandatory_publish_is_an_unroutable_error() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("pub", &["routed"]).await;
    let p = t.publisher();
    p.publish(&msg("routed", 0))
        .await
        .expect("a routed message is confirmed");
    let err = p.publish(&msg("nobody.listens", 1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unroutable, "{err}");
    assert!(err.is_transient());
    assert_eq!(t.broker.stats().unroutable(), 1);
    // The channel is still good after a return.
    p.publish(&msg("routed", 2)).await.unwrap();
    // A redrive route to a consumer that does not exist is returned too.
    let redrive = OutgoingMessage {
        route: Route::Consumer("ghost".into()),
        ..msg("x", 3)
    };
    assert_eq!(
        p.publish(&redrive).await.unwrap_err().kind(),
        ErrorKind::NotFound,
        "no such retry exchange"
    );
    p.publish(&msg("routed", 4))
        .await
        .expect("the publisher reopens its channel after a channel error");
}

#[tokio::test]
async fn pipelined_batch_of_1000_gets_1000_results() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("batch", &["b"]).await;
    let p = t.publisher();
    let batch: Vec<_> = (0..1000).map(|i| msg("b", i)).collect();
    let started = Instant::now();
    let results = p.publish_batch(&batch).await;
    let took = started.elapsed();
    assert_eq!(results.len(), 1000);
    assert!(
        results.iter().all(Result::is_ok),
        "{:?}",
        results.iter().find(|r| r.is_err())
    );
    eprintln!("1000 pipelined confirms in {took:?}");
    assert!(work_queue_holds(&t, "batch", 1000).await);
}

/// Publish `n` messages in one batch, to `lost_key` (bound to nothing) where `lost(i)` and to
/// `ok_key` elsewhere: each result is its own, unroutable or confirmed.
async fn publish_some_unroutable(
    t: &TestRabbit,
    n: usize,
    ok_key: &str,
    lost_key: &str,
    lost: impl Fn(usize) -> bool,
) {
    let batch: Vec<_> = (0..n)
        .map(|i| msg(if lost(i) { lost_key } else { ok_key }, i))
        .collect();
    let results = t.publisher().publish_batch(&batch).await;
    for (i, r) in results.iter().enumerate() {
        if lost(i) {
            assert_eq!(
                r.as_ref().unwrap_err().kind(),
                ErrorKind::Unroutable,
                "message {i}"
            );
        } else {
            assert!(r.is_ok(), "message {i}: {r:?}");
        }
    }
}

#[tokio::test]
async fn mixed_batch_matches_each_return_to_its_own_message() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("mixed", &["ok"]).await;
    publish_some_unroutable(&t, 200, "ok", "lost", |i| i % 7 == 3).await;
}

#[tokio::test]
async fn reject_publish_overflow_is_a_nack() {
    let t = TestRabbit::new("1s").await;
    let topo = t.add_consumer("full", &["f"]).await;
    let q = topo.names("full").work_queue;
    // A higher-priority policy caps the queue at one message, rejecting publishes beyond it.
    let mut def = serde_json::Map::new();
    def.insert("max-length".into(), 1.into());
    def.insert("overflow".into(), "reject-publish".into());
    let cap = PolicyInfo {
        name: format!("{}-cap", t.prefix),
        pattern: format!("^{}$", q.replace('.', "\\.")),
        apply_to: "queues".into(),
        definition: def,
        priority: 100,
    };
    t.api.put_policy(&cap).await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(15), || async {
            t.api.queue(&q).await.unwrap().and_then(|i| i.policy) == Some(cap.name.clone())
        })
        .await
    );
    let p = t.publisher();
    p.publish(&msg("f", 0)).await.unwrap();
    // Quorum queues enforce the limit once it is exceeded (a soft limit): at most one more.
    let mut kinds = Vec::new();
    for i in 1..=3 {
        kinds.push(p.publish(&msg("f", i)).await.err().map(|e| e.kind()));
    }
    assert_eq!(kinds.last(), Some(&Some(ErrorKind::Nacked)), "{kinds:?}");
    assert!(t.broker.stats().nacked() >= 1);
}

#[tokio::test]
async fn a_batch_larger_than_the_confirm_window_slides_through_it_with_each_return_its_own() {
    let t = TestRabbit::with_options("1s", |o| o.confirm_window = 16).await;
    t.add_consumer("window", &["w"]).await;
    publish_some_unroutable(&t, 400, "w", "nobody.w", |i| i % 50 == 25).await;
    let stats = t.broker.stats();
    assert_eq!(stats.max_in_flight(), 16, "never more than the window");
    // After the first fill, each confirm let exactly one more message out while the other 15
    // were still outstanding: the window slid, it never drained between chunks.
    assert_eq!(stats.window_slides(), 400 - 16);
    assert_eq!(stats.unroutable(), 8);
}

#[tokio::test]
async fn single_sends_at_once_share_confirm_waits_and_each_gets_its_own_result() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("together", &["routed"]).await;
    let p = t.publisher();
    // 120 callers at once, as many handlers retrying or parking together would; every
    // seventh is unroutable, so each group mixes returned and confirmed messages.
    let sends: Vec<_> = (0..120)
        .map(|i| {
            let p = p.clone();
            let topic = if i % 7 == 3 {
                "nobody.listens"
            } else {
                "routed"
            };
            tokio::spawn(async move { (i, p.publish(&msg(topic, i)).await) })
        })
        .collect();
    let mut routed = 0u64;
    for s in sends {
        let (i, r) = s.await.expect("send task");
        if i % 7 == 3 {
            assert_eq!(
                r.expect_err("an unroutable message is never reported confirmed")
                    .kind(),
                ErrorKind::Unroutable,
                "message {i}"
            );
        } else {
            r.unwrap_or_else(|e| panic!("message {i} is routed and confirmed: {e}"));
            routed += 1;
        }
    }
    let unroutable = (0..120).filter(|i| i % 7 == 3).count() as u64;
    assert_eq!(t.broker.stats().unroutable(), unroutable);
    assert!(
        t.broker.stats().max_in_flight() > 1,
        "callers waiting while a group was in flight went out together"
    );
    assert!(
        work_queue_holds(&t, "together", routed).await,
        "every confirmed message is in the queue, once"
    );
}

#[tokio::test]
async fn with_several_channels_a_single_send_does_not_wait_for_another_callers_batch() {
    let t = TestRabbit::with_options("1s", |o| o.publisher_channels = 4).await;
    t.add_consumer("apart", &["bulk", "one"]).await;
    let p = t.publisher();
    // A batch large enough to keep its channel busy for a while (seconds here).
    let bulk: Vec<_> = (0..20_000).map(|i| msg("bulk", i)).collect();
    let batch = {
        let p = p.clone();
        tokio::spawn(async move { p.publish_batch(&bulk).await })
    };
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            t.broker.stats().max_in_flight() >= 2
        })
        .await,
        "the batch is under way"
    );
    let started = Instant::now();
    p.publish(&msg("one", 0))
        .await
        .expect("the single message is confirmed");
    assert!(
        !batch.is_finished(),
        "a single message was confirmed only after the other caller's whole batch \
         ({:?}): it waited for that batch's confirms instead of going out on a channel of its own",
        started.elapsed()
    );
    let results = batch.await.expect("batch task");
    assert!(
        results.iter().all(Result::is_ok),
        "every bulk message is confirmed"
    );
    assert!(
        work_queue_holds(&t, "apart", 20_001).await,
        "every confirmed message is in the queue, once"
    );
}

#[tokio::test]
async fn with_several_channels_a_caller_whose_message_was_taken_waits_for_its_result() {
    let t = TestRabbit::with_options("1s", |o| o.publisher_channels = 4).await;
    t.add_consumer("waits", &["routed"]).await;
    let p = t.publisher();
    let sends: Vec<_> = (0..120)
        .map(|i| {
            let p = p.clone();
            tokio::spawn(async move { p.publish(&msg("routed", i)).await })
        })
        .collect();
    for s in sends {
        s.await.expect("send task").expect("confirmed");
    }
    // A caller finds the waiting list empty at most once: then its message is in another
    // caller's group, and it waits for the result instead of taking free channels' turns
    // over and over.
    let empty = t.broker.stats().empty_group_turns();
    assert!(
        empty <= 120,
        "{empty} turns found nothing to send for 120 callers: callers spun on free channels"
    );
}

/// A message larger than the broker takes (RabbitMQ's `max_message_size`, 128 MiB by default)
/// is refused before it is sent, as invalid data, and costs its batch mates nothing: sent, the
/// broker would close the channel under every message in flight on it.
#[tokio::test]
async fn a_message_over_the_brokers_size_limit_is_refused_before_it_is_sent() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("big", &["b"]).await;
    let p = t.publisher();
    let mut huge = msg("b", 1);
    huge.body = vec![b'x'; 128 * 1024 * 1024 + 1];
    let batch = vec![msg("b", 0), huge, msg("b", 2)];
    let results = p.publish_batch(&batch).await;
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(results[2].is_ok(), "{:?}", results[2]);
    let err = results[1].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    assert!(err.message().contains("134217728"), "{err}");
    assert!(!err.is_transient(), "{err}");
    assert!(work_queue_holds(&t, "big", 2).await);
}
