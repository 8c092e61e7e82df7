//! The publisher against the endpoint: topics fan out to every matching consumer queue,
//! batches larger than SQS's 10 entries are split, any body survives the trip, a message with
//! no route or over the size limit fails alone, and FIFO queues drop a second send of an id.

mod common;

use common::{TestSqs, order, order_subscriber, subscriber_of};
use postroom_core::{Delivery, ErrorKind, OutgoingMessage, Route, Subscriber, Transport};
use postroom_sqs::SqsSubscriber;
use postroom_testkit::cases::raw_message;
use std::time::Duration;

/// How long to wait for messages that should arrive.
const WAIT: Duration = Duration::from_secs(20);
/// How long to watch for a message that must not arrive (longer than the 2 s visibility
/// timeout, so an undeleted message would be back).
const QUIET: Duration = Duration::from_secs(3);

/// Receive and ack until `want` messages arrived or `within` passed.
async fn drain(
    sub: &mut SqsSubscriber,
    want: usize,
    within: Duration,
) -> Vec<postroom_core::ReceivedMessage> {
    let mut got = Vec::new();
    let end = std::time::Instant::now() + within;
    while got.len() < want && std::time::Instant::now() < end {
        if let Some(d) = sub.next(Duration::from_millis(500)).await.unwrap() {
            got.push(d.message().clone());
            d.ack().await.map_err(|(e, _)| e).unwrap();
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_fan_out_batches_split_and_bodies_survive() {
    let t = TestSqs::new().await;
    let transport = t.transport(t.config()).await;
    let mut a = subscriber_of(&transport, "a", &["order.*"], 10).await;
    let mut b = subscriber_of(&transport, "b", &["order.created"], 10).await;
    let mut msgs: Vec<OutgoingMessage> = (0..23)
        .map(|i| OutgoingMessage::from_envelope(&order(&format!("f{i}"), 1), "order.created"))
        .collect();
    msgs.push(raw_message("order.paid", b"\x00\xffbinary"));
    msgs.push(raw_message("nobody.listens", b"{}"));
    let mut huge = OutgoingMessage::from_envelope(&order("huge", 1), "order.created");
    huge.body = vec![b'x'; 1024 * 1024];
    msgs.push(huge);
    let results = transport.publisher().publish_batch(&msgs).await;
    assert_eq!(results.len(), 26);
    assert!(results[..24].iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        results[24].as_ref().unwrap_err().kind(),
        ErrorKind::Unroutable
    );
    assert_eq!(
        results[25].as_ref().unwrap_err().kind(),
        ErrorKind::InvalidData
    );

    let got_a = drain(&mut a, 24, WAIT).await;
    let got_b = drain(&mut b, 23, WAIT).await;
    assert_eq!(got_a.len(), 24, "order.* takes created and paid");
    assert_eq!(got_b.len(), 23, "order.created only");
    let binary = got_a
        .iter()
        .find(|m| m.id == Some(msgs[23].id))
        .expect("the binary body arrived");
    assert_eq!(binary.body, msgs[23].body);
    assert_eq!(binary.routing_key, "order.paid");
    let first = got_b.iter().find(|m| m.id == Some(msgs[0].id)).unwrap();
    assert_eq!(first.headers, msgs[0].headers, "headers arrive as sent");
    assert_eq!(first.deliveries, Some(1));
    assert!(
        drain(&mut b, 1, QUIET).await.is_empty(),
        "acked messages are gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_route_reaches_one_queue_and_fifo_drops_a_second_send_of_an_id() {
    let t = TestSqs::new().await;
    let mut cfg = t.config();
    cfg.fifo = true;
    let transport = t.transport(cfg).await;
    let mut a = order_subscriber(&transport, "a").await;
    let mut b = order_subscriber(&transport, "b").await;
    let env = order("dup", 1);
    let m = OutgoingMessage::from_envelope(&env, "order.created");
    transport.publisher().publish(&m).await.unwrap();
    transport.publisher().publish(&m).await.unwrap();
    let mut to_b = m.clone();
    to_b.route = Route::Consumer("b".into());
    to_b.headers.insert("x-redrive-count".into(), "1".into());
    transport.publisher().publish(&to_b).await.unwrap();
    assert_eq!(drain(&mut a, 1, WAIT).await.len(), 1);
    assert!(
        drain(&mut a, 1, QUIET).await.is_empty(),
        "the second send was deduplicated by message id"
    );
    let got = drain(&mut b, 2, WAIT).await;
    assert_eq!(got.len(), 2, "the topic copy and the redriven copy");
    assert!(drain(&mut b, 1, QUIET).await.is_empty());
    assert!(got.iter().all(|m| m.id == Some(env.id)), "same id");
    let err = transport
        .publisher()
        .publish(&OutgoingMessage {
            route: Route::Consumer("nobody".into()),
            ..m.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unroutable);
    // Another process (a redrive command) knows the queues by name, not by binding.
    let elsewhere = t.transport(transport.config().clone()).await;
    let mut to_a = m;
    to_a.route = Route::Consumer("a".into());
    to_a.headers.insert("x-redrive-count".into(), "1".into());
    elsewhere.publisher().publish(&to_a).await.unwrap();
    assert_eq!(
        drain(&mut a, 1, WAIT).await.len(),
        1,
        "redriven from elsewhere"
    );
}
