//! Parking on JetStream: a copy that reaches `max_deliver` without being settled.
//!
//! The consumer bounds crash loops itself: its crash-loop bound is the server's `max_deliver`,
//! so the last delivery the server makes is parked by the consumer with every diagnostic.
//! Only when that last delivery does not settle either does the server give up, publishing a
//! MAX_DELIVERIES advisory; the parking stream captures it and the dead-letter subscriber
//! turns it into a parked copy (`x-dead-letter-*`) and removes the message from the work
//! stream. On 2.9 that advisory is published only while a pull request is outstanding.

mod common;

use common::probe::{Mode, Probe, policy, run_on_orders};
use common::{
    TestNats, eventually, order, parked, parks_one_within, stream_messages, subscribe_to_orders,
};
use postroom_core::{
    BoxSubscriber, Consumer, Delivery, Envelope, ErrorClass, Ordering, ParkingFilter, ParkingStore,
    Subscriber, Subscription, Transport,
};
use postroom_nats::naming;
use postroom_testkit::StoreFixture;
use postroom_testkit::cases::assert_parked_for;
use postroom_testkit::cases::publish_to;
use postroom_testkit::stores::sqlite::SqliteFixture;
use std::sync::Arc;
use std::time::Duration;

/// Take `n` deliveries of the consumer's next copy and drop each unsettled, as a consumer
/// that dies while handling it would.
async fn crash_on(sub: &mut BoxSubscriber, n: u32) {
    for k in 1..=n {
        let d = loop {
            if let Some(d) = sub.next(Duration::from_secs(1)).await.unwrap() {
                break d;
            }
        };
        assert_eq!(d.message().deliveries, Some(k));
        drop(d);
    }
}

/// A transport that delivers a copy at most `max_deliver` times (each with a 1 s ack wait),
/// a subscriber of `consumer` taking one copy at a time, and `order(id, 1)` published.
async fn one_order(
    nats: &TestNats,
    max_deliver: u32,
    consumer: &str,
    id: &str,
) -> (Arc<postroom_nats::NatsTransport>, BoxSubscriber, Envelope) {
    let mut cfg = nats.config();
    cfg.ack_wait = Duration::from_secs(1);
    cfg.max_deliver = max_deliver;
    let transport = nats.transport(cfg);
    let sub = subscribe_to_orders(&transport, consumer, 1).await;
    let env = order(id, 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    (transport, sub, env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_parks_a_crash_loop_on_the_last_delivery_the_server_makes() {
    let nats = TestNats::new().await;
    let (transport, mut sub, env) = one_order(&nats, 3, "loop", "crashy").await;
    crash_on(&mut sub, 2).await;
    drop(sub);
    let probe = Probe::new(Mode::Ok);
    let running = run_on_orders(&transport, "loop", probe.clone(), policy("1s", 3), 1).await;
    let fixture = SqliteFixture::fresh().await;
    let store: Arc<dyn ParkingStore> = fixture.parking();
    assert!(
        parks_one_within(transport.as_ref(), "loop", &store, Duration::from_secs(20)).await,
        "parked by the consumer on delivery 3"
    );
    // Nothing more: no advisory (the delivery was settled), no second record.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(parked(transport.as_ref(), "loop", &store).await, 1);
    running.stop().await;
    assert!(
        probe.calls().is_empty(),
        "the handler never saw the crash loop"
    );
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.error_code, "crash_loop");
    assert_eq!(p.consumer_version, "test-1");
    assert_eq!(p.message_type.as_deref(), Some("order.created"));
    assert_eq!(p.routing_key, "order.created");
}

/// A consumer built without its transport ([`Consumer::new`], configured to allow more
/// deliveries than the server makes) and run with [`Consumer::run_on`] is bound by the
/// server's `max_deliver` as one built for the transport: it parks the last delivery the
/// server makes itself, with its diagnostics, and never hands it to the handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_bounds_a_crash_loop_by_the_servers_max_deliver() {
    let nats = TestNats::new().await;
    let (transport, mut sub, env) = one_order(&nats, 3, "late", "crashy").await;
    crash_on(&mut sub, 2).await;
    drop(sub);
    let probe = Probe::new(Mode::Ok);
    let mut cfg = postroom_testkit::probe::config("late", policy("1s", 3), 1, Ordering::Unordered);
    cfg.handler_timeout = Duration::from_secs(10);
    cfg.max_deliveries = 10;
    let consumer = Consumer::new(cfg, probe.clone());
    let (stop, rx) = tokio::sync::watch::channel(false);
    let on = transport.clone();
    let running = tokio::spawn(async move {
        let subscription = Subscription::new("late", &["order.created"]).prefetch(1);
        consumer.run_on(on.as_ref(), &subscription, rx).await
    });
    let fixture = SqliteFixture::fresh().await;
    let store: Arc<dyn ParkingStore> = fixture.parking();
    let parked_it =
        parks_one_within(transport.as_ref(), "late", &store, Duration::from_secs(10)).await;
    stop.send(true).unwrap();
    running
        .await
        .unwrap()
        .expect("run_on accepted the consumer");
    assert!(
        probe.calls().is_empty(),
        "the handler was given the last delivery the server makes: {:?}",
        probe.calls()
    );
    assert!(parked_it, "parked by the consumer on delivery 3");
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.error_code, "crash_loop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_deliveries_advisory_becomes_a_parked_copy_and_the_message_leaves_the_work_stream() {
    let nats = TestNats::new().await;
    let (transport, mut sub, env) = one_order(&nats, 2, "adv", "limit").await;
    // Both deliveries die unsettled, and nothing parks the copy.
    crash_on(&mut sub, 2).await;
    let parking_stream = naming::parking_stream(&nats.prefix, "adv");
    // The subscriber keeps a pull request outstanding, so the server advertises the limit.
    assert!(
        eventually(Duration::from_secs(15), || async {
            stream_messages(&nats.conn, &parking_stream).await == 1
        })
        .await,
        "the MAX_DELIVERIES advisory was captured in the parking stream"
    );
    assert!(
        sub.next(Duration::from_secs(2)).await.unwrap().is_none(),
        "no delivery past max_deliver"
    );
    sub.close().await;
    assert_eq!(stream_messages(&nats.conn, &nats.prefix).await, 1);
    let fixture = SqliteFixture::fresh().await;
    let store: Arc<dyn ParkingStore> = fixture.parking();
    assert_eq!(parked(transport.as_ref(), "adv", &store).await, 1);
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.consumer, "adv");
    assert_eq!(p.error_class, ErrorClass::Unknown);
    assert_eq!(p.routing_key, "order.created");
    assert_parked_for(p, "max_deliveries", 2, "2 deliveries");
    assert_eq!(p.body, env.to_bytes());
    assert_eq!(
        stream_messages(&nats.conn, &nats.prefix).await,
        0,
        "removed from the work stream once stored"
    );
    assert_eq!(
        stream_messages(&nats.conn, &parking_stream).await,
        1,
        "the advisory stays in the parking stream (acknowledged), as limits retention keeps it"
    );
}

/// With nobody pulling when the last delivery's ack wait runs out, 2.9 stays quiet: the
/// advisory comes once a pull request is outstanding again (a consumer that restarts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisory_waits_for_a_pull_request_and_then_parks() {
    let nats = TestNats::new().await;
    let (transport, mut sub, env) = one_order(&nats, 2, "quiet", "quiet").await;
    crash_on(&mut sub, 2).await;
    sub.close().await;
    drop(sub);
    let parking_stream = naming::parking_stream(&nats.prefix, "quiet");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let quiet = stream_messages(&nats.conn, &parking_stream).await;
    assert_eq!(
        quiet, 0,
        "2.9 advertises the limit only to an outstanding pull request"
    );
    let sub = subscribe_to_orders(&transport, "quiet", 1).await;
    let fixture = SqliteFixture::fresh().await;
    let store: Arc<dyn ParkingStore> = fixture.parking();
    assert!(
        parks_one_within(transport.as_ref(), "quiet", &store, Duration::from_secs(15)).await,
        "parked once a pull request was outstanding"
    );
    drop(sub);
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(
        (p.message_id, p.error_code.as_str()),
        (env.id, "max_deliveries")
    );
}
