//! A subscriber is attached when `subscribe` returns: the server holds the first pull request
//! of each of its durables, so the program's start-up ends when its consumers are ready, and a
//! message published right after is consumed.

mod common;

use common::{TestNats, order, subscribe_to_orders};
use postroom_core::{Delivery, Subscriber, Transport};
use postroom_testkit::cases::publish_to;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_right_after_subscribe_returns_is_consumed() {
    let nats = TestNats::new().await;
    let transport = nats.transport(nats.config());
    let mut sub = subscribe_to_orders(&transport, "ready", 4).await;
    let env = order("ready", 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    let delivery = sub
        .next(Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the message published right after subscribe returned is delivered");
    assert_eq!(delivery.message().id, Some(env.id));
    delivery.ack().await.map_err(|(e, _)| e).unwrap();
    sub.close().await;
}
