//! Topology through the admin client: the plan lists every topic a consumer needs (its route
//! topics, one retry topic per stage, redrive, parking and the compacted delivery ledger) with
//! partitions, replication and retention; apply creates them; a second plan is empty; a topic with fewer partitions
//! or another replication factor than wanted is reported, never changed.

mod common;

use common::TestKafka;
use postroom_core::{Subscription, Transport};
use postroom_kafka::topology::{Consumers, Topology};
use postroom_kafka::{Change, KafkaTransport};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_then_apply_creates_every_topic_once() {
    let kafka = TestKafka::new("5s,30s");
    let mut config = kafka.config.clone().partitions(3);
    config.retention = Some(Duration::from_secs(7 * 24 * 3600));
    let consumers = Consumers::default().with("inventory", &["order.created", "order.*"]);
    let topology = Topology::new(&config, consumers).expect("topology");
    let plan = topology.plan().await.expect("plan");
    let p = &kafka.prefix;
    let mut names: Vec<String> = plan
        .iter()
        .map(|c| match c {
            Change::Create(t) if t.name.ends_with(".deliveries") => {
                // The delivery ledger: one partition, compacted, kept however long.
                assert_eq!(t.partitions, 1);
                assert_eq!(
                    t.config,
                    vec![("cleanup.policy".to_string(), "compact".to_string())]
                );
                t.name.clone()
            }
            Change::Create(t) => {
                assert_eq!(t.partitions, 3);
                assert_eq!(t.replication, 1);
                assert!(
                    t.config
                        .contains(&("retention.ms".into(), "604800000".into()))
                );
                t.name.clone()
            }
            other => panic!("unexpected {other}"),
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            format!("{p}.inventory.deliveries"),
            format!("{p}.inventory.parking"),
            format!("{p}.inventory.redrive"),
            format!("{p}.inventory.retry.30s"),
            format!("{p}.inventory.retry.5s"),
            format!("{p}.order.created"),
        ],
        "a pattern route creates no topic"
    );
    assert!(
        plan[0].to_string().starts_with("create topic "),
        "{}",
        plan[0]
    );
    topology.apply().await.expect("apply");
    let existing = topology.existing().await.expect("existing");
    for n in &names {
        let wanted = if n.ends_with(".deliveries") { 1 } else { 3 };
        assert_eq!(
            existing.get(n),
            Some(&wanted),
            "{n} created with {wanted} partitions"
        );
    }
    assert!(
        topology.plan().await.expect("plan").is_empty(),
        "apply is idempotent"
    );

    let wider = Topology::new(
        &config.clone().partitions(6),
        Consumers::default().with("inventory", &["order.created"]),
    )
    .expect("topology");
    let plan = wider.plan().await.expect("plan");
    assert!(
        plan.iter().all(|c| matches!(
            c,
            Change::FewerPartitions {
                has: 3,
                wanted: 6,
                ..
            }
        )),
        "{plan:?}"
    );

    // A replication factor other than the topics' is reported too, and left as it is.
    let mut deeper = config.clone();
    deeper.replication = 2;
    let deeper = Topology::new(
        &deeper,
        Consumers::default().with("inventory", &["order.created"]),
    )
    .expect("topology");
    let plan = deeper.plan().await.expect("plan");
    assert!(
        !plan.is_empty()
            && plan.iter().all(|c| matches!(
                c,
                Change::OtherReplication {
                    has: 1,
                    wanted: 2,
                    ..
                }
            )),
        "{plan:?}"
    );
    assert!(
        plan[0]
            .to_string()
            .contains("replication factor 1, 2 wanted"),
        "{}",
        plan[0]
    );
    assert!(
        deeper
            .apply()
            .await
            .expect("apply")
            .iter()
            .all(|c| !postroom_core::TopologyChange::is_made(c)),
        "apply leaves the replication as it is"
    );
}

/// A subscription of a consumer the topology never heard of creates what it needs at run time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_creates_a_new_consumers_topics() {
    let kafka = TestKafka::new("1s,2s");
    let t = kafka.transport_bound_to("late", "late.topic").await;
    let topics = kafka.topics();
    let p = &kafka.prefix;
    for n in [
        format!("{p}.late.topic"),
        format!("{p}.late.retry.1s"),
        format!("{p}.late.retry.2s"),
        format!("{p}.late.redrive"),
        format!("{p}.late.parking"),
    ] {
        assert!(topics.contains(&n), "{n} missing from {topics:?}");
    }
    assert!(
        t.bind(&Subscription::new("late", &["bad topic"]))
            .await
            .is_err(),
        "a route Kafka cannot name is refused clearly"
    );
}

/// A record over the producer's message limit fails alone, as invalid data, and its batch
/// mates are confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_over_the_message_limit_fails_alone() {
    let kafka = TestKafka::new("1s");
    let t = kafka.transport_bound_to("big", "order.created").await;
    postroom_testkit::cases::a_message_over_the_transports_limit_fails_alone(&t, "order.created")
        .await;
}

/// The next delivery of `sub`, within 60 s.
async fn next_delivery(sub: &mut postroom_core::BoxSubscriber) -> postroom_core::BoxDelivery {
    use postroom_core::Subscriber;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if let Some(d) = sub.next(Duration::from_secs(5)).await.expect("next") {
            return d;
        }
    }
    panic!("no delivery within 60 s");
}

/// A record that only just fits the message limit is retried and parked like any other: the
/// copies carry more headers than the original (the retry attempt, the error text, every
/// diagnostic), so they need room the original did not; without it the copy could never be
/// sent, and the record went back to its partition for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_just_fits_the_limit_can_still_be_retried_and_parked() {
    use postroom_core::consumer::record::parked_record;
    use postroom_core::{Delivery, ErrorClass, OutgoingMessage, ParkReason};
    let kafka = TestKafka::new("1s");
    let t = KafkaTransport::new(kafka.config.clone()).expect("transport");
    let mut sub = t
        .subscribe(&Subscription::new("near", &["order.created"]))
        .await
        .expect("subscribe");
    let mut m = OutgoingMessage::from_envelope(
        &postroom_testkit::cases::order("near-1", 1),
        "order.created",
    );
    let around: usize = m.headers.iter().map(|(k, v)| k.len() + v.len() + 8).sum();
    m.body = vec![b'x'; postroom_kafka::producer::MAX_MESSAGE_BYTES - around - 200];
    t.publisher().publish(&m).await.expect("the original fits");

    let first = next_delivery(&mut sub).await;
    assert_eq!(first.message().body.len(), m.body.len());
    let mut plan = postroom_testkit::probe::first_transient_retry(
        &postroom_testkit::probe::policy("1s", 3),
        chrono::Utc::now(),
    );
    plan.error_message = "e".repeat(500);
    first
        .retry(&plan)
        .await
        .map_err(|(e, _)| e)
        .expect("the retry copy is sent");

    let again = next_delivery(&mut sub).await;
    assert_eq!(again.message().body.len(), m.body.len());
    assert_eq!(again.message().attempt(), 1);
    let cfg = postroom_testkit::probe::config(
        "near",
        postroom_testkit::probe::policy("1s", 3),
        1,
        postroom_core::Ordering::Unordered,
    );
    let reason = ParkReason {
        error_class: ErrorClass::Transient,
        error_code: "retry_budget_exhausted".into(),
        error_message: "e".repeat(10_000),
    };
    let record = parked_record(&cfg, again.message(), None, &reason);
    again
        .park(&record)
        .await
        .map_err(|(e, _)| e)
        .expect("the parking copy is sent");
}
