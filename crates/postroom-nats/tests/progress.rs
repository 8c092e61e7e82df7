//! A handler that outlives `ack_wait`: Progress heartbeats keep its delivery owned, so the
//! server does not hand the copy to anyone else while it runs; once the delivery is dropped
//! unsettled, the heartbeats stop and the copy comes back after `ack_wait`.

mod common;

use common::probe::{Mode, Probe, policy, run_on_orders};
use common::{TestNats, next_delivery, order, subscribe_to_orders};
use postroom_core::{Delivery, Subscriber, Transport};
use postroom_nats::NatsTransport;
use postroom_testkit::cases::publish_to;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A transport on which a delivery without a Progress heartbeat is owned for 1 s (`ack_wait`).
fn transport_with_one_second_ack_wait(nats: &TestNats) -> Arc<NatsTransport> {
    let mut cfg = nats.config();
    cfg.ack_wait = Duration::from_secs(1);
    nats.transport(cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_longer_than_ack_wait_keeps_its_delivery() {
    let nats = TestNats::new().await;
    let transport = transport_with_one_second_ack_wait(&nats);
    let probe = Probe::new(Mode::Slow(Duration::from_millis(3500)));
    // Two processes: a copy whose ownership lapsed would go to the other one.
    let start = || run_on_orders(&transport, "slow", probe.clone(), policy("1s", 2), 1);
    let a = start().await;
    let b = start().await;
    let env = order("slow", 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    assert!(probe.handled_within(env.id, Duration::from_secs(10)).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stats = a.stats.snapshot().applied + b.stats.snapshot().applied;
    a.stop().await;
    b.stop().await;
    assert_eq!(
        probe.calls_for(env.id).len(),
        1,
        "never redelivered while the handler ran"
    );
    assert_eq!(stats, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_delivery_stops_its_heartbeats_and_comes_back() {
    let nats = TestNats::new().await;
    let transport = transport_with_one_second_ack_wait(&nats);
    let mut sub = subscribe_to_orders(&transport, "drop", 1).await;
    publish_to(transport.publisher(), &order("d", 1), "order.created").await;
    let first = sub
        .next(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("delivered");
    assert_eq!(first.message().deliveries, Some(1));
    let dropped = Instant::now();
    drop(first);
    let again = next_delivery(
        &mut sub,
        dropped,
        Duration::from_secs(10),
        "never came back",
    )
    .await;
    assert!(
        dropped.elapsed() >= Duration::from_millis(900),
        "back only after ack_wait"
    );
    assert_eq!(again.message().deliveries, Some(2));
    again.ack().await.map_err(|(e, _)| e).unwrap();
}
