//! Route patterns (`*`, `#`) subscribe to every matching topic, with AMQP semantics kept by
//! the subscriber; backlog figures are the group's lag on its topics and retry stages.

mod common;

use common::TestKafka;
use common::ordered::{OrderedHandler, Running, event, publish_in_order, retries, run, wait_until};
use postroom_core::{Subscription, Transport};
use postroom_kafka::KafkaTransport;
use std::sync::Arc;
use std::time::Duration;

/// A transport on a fresh workload with `topics` created (as a producer would), and consumer
/// `pattern` running on `shop.*` with a handler that records what it applies.
async fn on_shop_pattern(
    kafka: &TestKafka,
    topics: &[&str],
) -> (Arc<dyn Transport>, Arc<OrderedHandler>, Running) {
    let t: Arc<dyn Transport> = Arc::new(KafkaTransport::new(kafka.config.clone()).unwrap());
    // Patterns create no topic: these exist before the consumer subscribes.
    for topic in topics {
        t.bind(&Subscription::new("producer-side", &[topic]))
            .await
            .unwrap();
    }
    let h = OrderedHandler::new(&[], false);
    let r = run_with_one_retry(&t, "pattern", "shop.*", h.clone()).await;
    (t, h, r)
}

/// Consumer `name` on `route` running `handler`, two records at a time; a failed record is
/// retried once, after 1 s.
async fn run_with_one_retry(
    t: &Arc<dyn Transport>,
    name: &str,
    route: &str,
    handler: Arc<OrderedHandler>,
) -> Running {
    run(t.clone(), name, &[route], handler, retries("1s", 1), 2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_route_takes_matching_topics_only() {
    let kafka = TestKafka::new("1s");
    let (t, h, r) = on_shop_pattern(&kafka, &["shop.created", "shop.paid", "shop.paid.late"]).await;
    publish_in_order(t.as_ref(), "shop.created", &[event("a", 1)]).await;
    publish_in_order(t.as_ref(), "shop.paid", &[event("b", 1)]).await;
    publish_in_order(t.as_ref(), "shop.paid.late", &[event("c", 1)]).await;
    assert!(
        wait_until(Duration::from_secs(30), || h.applied_count() >= 2).await,
        "both one-word topics consumed: {:?}",
        h.seen()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.stop().await;
    let mut keys: Vec<String> = h.seen().iter().map(|s| s.key.clone()).collect();
    keys.sort();
    assert_eq!(keys, vec!["a", "b"], "`*` matches one word, never two");
}

/// A topic created after the member subscribed is found on a later read of the topic list,
/// and the member subscribes anew to read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_route_takes_a_matching_topic_created_later() {
    let kafka = TestKafka::new("1s");
    let (t, h, r) = on_shop_pattern(&kafka, &["shop.created"]).await;
    publish_in_order(t.as_ref(), "shop.created", &[event("a", 1)]).await;
    assert!(
        wait_until(Duration::from_secs(30), || h.applied_of("a") == vec![1]).await,
        "the topic that existed: {:?}",
        h.seen()
    );
    t.bind(&Subscription::new("producer-side", &["shop.cancelled"]))
        .await
        .unwrap();
    publish_in_order(t.as_ref(), "shop.cancelled", &[event("b", 1)]).await;
    assert!(
        wait_until(Duration::from_secs(30), || h.applied_of("b") == vec![1]).await,
        "the topic created later: {:?}",
        h.seen()
    );
    r.stop().await;
    assert_eq!(
        h.applied_of("a"),
        vec![1],
        "no record twice: {:?}",
        h.seen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_is_the_groups_lag() {
    let kafka = TestKafka::new("1s");
    let t = kafka.transport_bound_to("lagging", "orders").await;
    let events: Vec<_> = (1..=5).map(|v| event("lag", v)).collect();
    publish_in_order(&t, "orders", &events).await;
    let b = t.backlog("lagging").await.expect("backlog");
    assert_eq!(b.ready, 5, "nothing consumed yet: {b:?}");
    assert_eq!(b.delayed, 0);
}

/// A consumer's own topics (`<prefix>.<consumer>.parking`, `.redrive`, `.deliveries`,
/// `.retry.<delay>`) share the namespace of route topics (`<prefix>.<route>`): a pattern that
/// matches their names word for word must still never take them. Consumer `shop` parks what
/// it cannot apply; consumer `audit`, on `shop.*`, must see the original once and never the
/// parked copy (nor the ledger's records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_route_never_takes_another_consumers_own_topics() {
    let kafka = TestKafka::new("1s");
    let t: Arc<dyn Transport> = Arc::new(KafkaTransport::new(kafka.config.clone()).unwrap());
    let shop = OrderedHandler::new(&[("a", 1, 99)], false);
    let rs = run_with_one_retry(&t, "shop", "shop.created", shop.clone()).await;
    let audit = OrderedHandler::new(&[], false);
    let ra = run_with_one_retry(&t, "audit", "shop.*", audit.clone()).await;
    publish_in_order(t.as_ref(), "shop.created", &[event("a", 1)]).await;
    assert!(
        wait_until(Duration::from_secs(30), || shop.seen().len() >= 2).await,
        "shop tried twice and parked: {:?}",
        shop.seen()
    );
    // Time for the pattern's metadata refresh (2 s) to find the parking topic and read it.
    tokio::time::sleep(Duration::from_secs(8)).await;
    ra.stop().await;
    rs.stop().await;
    assert_eq!(
        audit.calls_of("a"),
        vec![(1, 0)],
        "audit handles the original once and nothing of shop's own topics: {:?}",
        audit.seen()
    );
    // Nor does it read them at all: a topic the group is assigned and reads gets the group's
    // committed offsets; shop's parking, ledger and redrive topics get none from audit.
    let audit_group = format!("{}.audit", kafka.prefix);
    assert_eq!(
        kafka.committed_topics(&audit_group),
        vec![format!("{}.shop.created", kafka.prefix)],
        "audit reads shop.created and no topic of shop's own"
    );
}

/// Publishing to, or binding, a route that ends like a consumer's own topic is refused: the
/// record would land in that consumer's parking topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_shaped_like_a_consumers_own_topic_is_refused_both_ways() {
    let kafka = TestKafka::new("1s");
    let t = KafkaTransport::new(kafka.config.clone()).unwrap();
    let e = t
        .publisher()
        .publish(&postroom_core::OutgoingMessage::from_envelope(
            &event("a", 1),
            "inventory.parking",
        ))
        .await
        .unwrap_err();
    assert!(e.message().contains("own topics"), "{e}");
    let e = t
        .bind(&Subscription::new("inventory", &["orders.retry.5s"]))
        .await
        .unwrap_err();
    assert!(e.message().contains("own topics"), "{e}");
    assert!(
        kafka.topics().iter().all(|n| !n.ends_with(".parking")),
        "nothing was created: {:?}",
        kafka.topics()
    );
}
