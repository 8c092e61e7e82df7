//! Route patterns (`*`, `#`) subscribe to every matching topic, with AMQP semantics kept by
//! the subscriber; backlog figures are the group's lag on its topics and retry stages.

mod common;

use common::TestKafka;
use common::ordered::{OrderedHandler, event, publish_in_order, retries, run, wait_until};
use postroom_core::{Subscription, Transport};
use postroom_kafka::KafkaTransport;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_route_takes_matching_topics_only() {
    let kafka = TestKafka::new("1s");
    let t: Arc<dyn Transport> = Arc::new(KafkaTransport::new(kafka.config.clone()).unwrap());
    // The topics exist before the pattern subscription (patterns create none).
    for topic in ["shop.created", "shop.paid", "shop.paid.late"] {
        t.bind(&Subscription::new("producer-side", &[topic]))
            .await
            .unwrap();
    }
    let h = OrderedHandler::new(&[], false);
    let r = run(
        t.clone(),
        "pattern",
        &["shop.*"],
        h.clone(),
        retries("1s", 1),
        2,
    )
    .await;
    publish_in_order(t.as_ref(), "shop.created", &[event("a", 1)]).await;
    publish_in_order(t.as_ref(), "shop.paid", &[event("b", 1)]).await;
    publish_in_order(t.as_ref(), "shop.paid.late", &[event("c", 1)]).await;
    assert!(
        wait_until(Duration::from_secs(30), || h.applied.lock().unwrap().len()
            >= 2)
        .await,
        "both one-word topics consumed: {:?}",
        h.seen()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.stop().await;
    let mut keys: Vec<String> = h.seen().iter().map(|s| s.key.clone()).collect();
    keys.sort();
    assert_eq!(keys, vec!["a", "b"], "`*` matches one word, never two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_is_the_groups_lag() {
    let kafka = TestKafka::new("1s");
    let t = KafkaTransport::new(kafka.config.clone()).unwrap();
    t.bind(&Subscription::new("lagging", &["orders"]))
        .await
        .unwrap();
    let events: Vec<_> = (1..=5).map(|v| event("lag", v)).collect();
    publish_in_order(&t, "orders", &events).await;
    let b = t.backlog("lagging").await.expect("backlog");
    assert_eq!(b.ready, 5, "nothing consumed yet: {b:?}");
    assert_eq!(b.delayed, 0);
}
