//! The subscriber's own contract: `next` returns within its wait (long polling inside it), and
//! messages received into its buffer but never handed out go back at once when it closes.

mod common;

use common::{TestSqs, order};
use postroom_core::{Delivery, OutgoingMessage, Subscriber, Subscription, Transport};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_returns_within_its_wait_and_close_releases_the_buffer() {
    let t = TestSqs::new().await;
    let mut cfg = t.config();
    // Long enough that a message coming back early can only have been released.
    cfg.visibility_timeout = Duration::from_secs(60);
    let transport = t.transport(cfg).await;
    let sub = Subscription::new("buffered", &["order.created"]).prefetch(5);
    let mut first = transport.subscriber(&sub).await.unwrap();
    for wait in [Duration::from_millis(300), Duration::from_millis(1600)] {
        let started = Instant::now();
        assert!(first.next(wait).await.unwrap().is_none());
        let took = started.elapsed();
        assert!(
            took >= wait.saturating_sub(Duration::from_millis(50))
                && took < wait + Duration::from_secs(1),
            "an empty next({wait:?}) took {took:?}"
        );
    }
    let envs: Vec<_> = (0..3).map(|i| order(&format!("buf{i}"), 1)).collect();
    let messages: Vec<_> = envs
        .iter()
        .map(|e| OutgoingMessage::from_envelope(e, "order.created"))
        .collect();
    transport.publisher().publish_batch(&messages).await;
    let d = loop {
        if let Some(d) = first.next(Duration::from_millis(500)).await.unwrap() {
            break d;
        }
    };
    d.ack().await.map_err(|(e, _)| e).unwrap();
    // The other two were received with it and wait in the buffer.
    first.close().await;
    assert_eq!(transport.stats().released(), 2);
    let mut second = transport.subscriber(&sub).await.unwrap();
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while got.len() < 2 && Instant::now() < end {
        if let Some(d) = second.next(Duration::from_millis(500)).await.unwrap() {
            got.push(d.message().deliveries);
            d.ack().await.map_err(|(e, _)| e).unwrap();
        }
    }
    assert_eq!(
        got,
        vec![Some(2), Some(2)],
        "back at once, well before the 60 s visibility timeout; SQS counted the first receive"
    );
}
