//! Queues from the topology: each consumer's DLQ and work queue with its `RedrivePolicy`,
//! visibility timeout and retention; `plan` is a dry run, `apply` makes the changes once.

mod common;

use aws_sdk_sqs::types::QueueAttributeName;
use common::{TestSqs, subscriber_of};
use postroom_sqs::{Change, Topology};
use postroom_testkit::cases::publish_to;
use std::collections::HashMap;
use std::time::Duration;

async fn attributes(t: &TestSqs, name: &str) -> HashMap<String, String> {
    let url = t
        .client
        .get_queue_url()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();
    t.client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_is_a_dry_run_and_apply_makes_the_queues_once() {
    let t = TestSqs::new().await;
    let mut cfg = t.config().with_consumer("inventory", &["order.created"]);
    cfg.max_receive_count = 4;
    cfg.retention = Duration::from_secs(3600);
    cfg.dlq_retention = Duration::from_secs(7200);
    let topology = Topology::new(t.client.clone(), cfg.clone()).unwrap();
    let names = cfg.names("inventory").unwrap();

    let plan = topology.plan().await.unwrap();
    assert_eq!(plan.len(), 2, "{plan:?}");
    assert!(
        matches!(&plan[0], Change::CreateQueue { name, .. } if *name == names.dlq),
        "the DLQ first: {}",
        plan[0]
    );
    assert!(
        matches!(&plan[1], Change::CreateQueue { name, attributes } if *name == names.work && attributes["RedrivePolicy"].contains("maxReceiveCount"))
    );
    assert!(
        topology.queue_url(&names.work).await.unwrap().is_none(),
        "plan changed nothing"
    );

    let made = topology.apply().await.unwrap();
    assert_eq!(made.len(), 2);
    let work = attributes(&t, &names.work).await;
    let dlq = attributes(&t, &names.dlq).await;
    let policy: serde_json::Value = serde_json::from_str(&work["RedrivePolicy"]).unwrap();
    assert_eq!(policy["deadLetterTargetArn"], dlq["QueueArn"].as_str());
    assert_eq!(policy["maxReceiveCount"].to_string().trim_matches('"'), "4");
    assert_eq!(work["VisibilityTimeout"], "2");
    assert_eq!(work["MessageRetentionPeriod"], "3600");
    assert_eq!(dlq["MessageRetentionPeriod"], "7200");
    assert!(!dlq.contains_key("RedrivePolicy"));

    assert!(
        topology.plan().await.unwrap().is_empty(),
        "nothing left to do"
    );
    assert!(
        topology.apply().await.unwrap().is_empty(),
        "apply twice changes nothing"
    );

    // A setting changed by hand is found and put back.
    let url = topology.queue_url(&names.work).await.unwrap().unwrap();
    t.client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::VisibilityTimeout, "99")
        .send()
        .await
        .unwrap();
    let plan = topology.plan().await.unwrap();
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert_eq!(
        plan[0].to_string(),
        format!(
            "set VisibilityTimeout of queue {}: \"99\" -> \"2\"",
            names.work
        )
    );
    topology.apply().await.unwrap();
    assert_eq!(attributes(&t, &names.work).await["VisibilityTimeout"], "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_queues_have_fifo_dlqs_and_no_content_based_deduplication() {
    let t = TestSqs::new().await;
    let mut cfg = t.config().with_consumer("ledger", &["payment.*"]);
    cfg.fifo = true;
    let topology = Topology::new(t.client.clone(), cfg.clone()).unwrap();
    topology.apply().await.unwrap();
    let names = cfg.names("ledger").unwrap();
    assert!(names.work.ends_with(".fifo") && names.dlq.ends_with("-dlq.fifo"));
    for q in [&names.work, &names.dlq] {
        let a = attributes(&t, q).await;
        assert_eq!(a["FifoQueue"], "true", "{q}");
        assert_eq!(a["ContentBasedDeduplication"], "false", "{q}");
    }
    assert!(topology.plan().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_needs_the_queues_of_its_listed_consumers() {
    let t = TestSqs::new().await;
    let cfg = t.config().with_consumer("inventory", &["order.created"]);
    let err = postroom_sqs::SqsTransport::connect(t.client.clone(), cfg.clone())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), postroom_core::ErrorKind::NotFound);
    assert!(err.to_string().contains("apply the topology"), "{err}");
    t.apply(&cfg).await;
    let transport = t.transport(cfg).await;
    assert_eq!(
        transport.queues("inventory").unwrap().patterns,
        vec!["order.created".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_counts_ready_and_received_messages() {
    use postroom_core::{Delivery, Subscriber, Transport};
    let t = TestSqs::new().await;
    let transport = t.transport(t.config()).await;
    let mut sub = subscriber_of(&transport, "inventory", &["order.created"], 1).await;
    for i in 0..3 {
        let env = common::order(&format!("b{i}"), 1);
        publish_to(transport.publisher(), &env, "order.created").await;
    }
    let b = transport.backlog("inventory").await.unwrap();
    assert_eq!((b.ready, b.unacked), (3, 0));
    let d = loop {
        if let Some(d) = sub.next(Duration::from_millis(500)).await.unwrap() {
            break d;
        }
    };
    let b = transport.backlog("inventory").await.unwrap();
    assert_eq!(
        (b.ready, b.unacked),
        (2, 1),
        "one received, not yet deleted"
    );
    d.ack().await.map_err(|(e, _)| e).unwrap();
    let b = transport.backlog("inventory").await.unwrap();
    assert_eq!((b.ready, b.unacked), (2, 0));
    assert_eq!(b.oldest_ready_age, None, "SQS's API does not say");
    let err = transport.backlog("nobody").await.unwrap_err();
    assert_eq!(err.kind(), postroom_core::ErrorKind::NotFound);
}
