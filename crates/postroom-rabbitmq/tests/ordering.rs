//! Ordering on RabbitMQ: partitioned mode (consistent-hash exchange on the aggregate key, one
//! active consumer per partition) keeps per-aggregate order with two consumers per partition,
//! also when the active ones go away; and the aggregate version guard applies out-of-order
//! versions in order, acks duplicates, and never rolls state back.

mod common;

use common::probe::{Mode, Probe, policy, run};
use common::{TestRabbit, eventually, order};
use postroom_core::ordering::{VersionDecision, check_version};
use postroom_core::{Handled, Handler, HandlerError, Incoming, OutgoingMessage, Publisher};
use postroom_rabbitmq::{RabbitSubscriber, SubscriberOptions};
use postroom_testkit::cases::publish_versions;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_mode_keeps_per_aggregate_order_with_two_consumers_per_partition() {
    let t = TestRabbit::new("1s").await;
    t.configure(|c| {
        *c = c
            .clone()
            .with_consumer("po", &["order.created"])
            .partitioned("po", 3)
    });
    let topo = t.topology();
    topo.apply().await.unwrap();
    let plan = topo.plan().await.unwrap();
    assert!(
        plan.is_empty(),
        "partitioned topology is up to date after apply: {plan:#?}"
    );
    let n = topo.names("po");
    let publisher = t.publisher();
    // One probe per partition (shared by its two consumers): which partition handled what.
    let probes: Vec<Arc<Probe>> = (0..3).map(|_| Probe::new(Mode::Ok)).collect();
    let handled = || probes.iter().map(|p| p.calls().len()).sum::<usize>();
    let mut first_wave = Vec::new();
    let mut second_wave = Vec::new();
    for (i, probe) in (0u16..).zip(&probes) {
        for wave in [&mut first_wave, &mut second_wave] {
            let mut opts = SubscriberOptions::new(1);
            opts.queue = Some(n.partition_queue(i));
            let sub =
                RabbitSubscriber::new(t.broker.clone(), publisher.clone(), &t.cfg(), "po", opts)
                    .unwrap();
            wave.push(run(sub, "po", probe.clone(), policy("1s", 3), 1));
        }
    }
    let aggregates = ["a", "b", "c", "d", "e", "f"];
    // Ten versions of each aggregate, handled; then the consumers of a wave go away. Once the
    // first consumer of each partition is gone, the single-active-consumer hand-over gives
    // the partition to the second one.
    for (versions, total, what, wave) in [
        (1..=10, 60, "the first 60", first_wave),
        (11..=20, 120, "all 120", second_wave),
    ] {
        publish_versions(publisher.as_ref(), &aggregates, versions).await;
        assert!(
            eventually(Duration::from_secs(30), || async { handled() >= total }).await,
            "{what} handled ({} so far)",
            handled()
        );
        for r in wave {
            r.stop().await;
        }
    }
    for a in aggregates {
        let key = format!("order:{a}");
        let homes: Vec<usize> = (0..3)
            .filter(|&i| probes[i].calls().iter().any(|c| c.key == key))
            .collect();
        assert_eq!(
            homes.len(),
            1,
            "aggregate {a} lives in one partition: {homes:?}"
        );
        let versions: Vec<u64> = probes[homes[0]]
            .calls()
            .iter()
            .filter(|c| c.key == key)
            .map(|c| c.version)
            .collect();
        assert_eq!(
            versions,
            (1..=20).collect::<Vec<_>>(),
            "aggregate {a} in order"
        );
    }
    let used = probes.iter().filter(|p| !p.calls().is_empty()).count();
    assert!(used >= 2, "aggregates spread over partitions ({used} used)");
}

/// Messages without an aggregate are each their own key: the consistent-hash exchange spreads
/// them over the partitions instead of sending every one to the same partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_without_an_aggregate_spread_over_the_partitions() {
    let t = TestRabbit::new("1s").await;
    t.configure(|c| {
        *c = c
            .clone()
            .with_consumer("pn", &["order.created"])
            .partitioned("pn", 3)
    });
    let topo = t.topology();
    topo.apply().await.unwrap();
    let n = topo.names("pn");
    let publisher = t.publisher();
    let probes: Vec<Arc<Probe>> = (0..3).map(|_| Probe::new(Mode::Ok)).collect();
    let mut running = Vec::new();
    for (i, probe) in (0u16..).zip(&probes) {
        let mut opts = SubscriberOptions::new(4);
        opts.queue = Some(n.partition_queue(i));
        let sub = RabbitSubscriber::new(t.broker.clone(), publisher.clone(), &t.cfg(), "pn", opts)
            .unwrap();
        running.push(run(sub, "pn", probe.clone(), policy("1s", 3), 1));
    }
    let messages: Vec<OutgoingMessage> = (0..30)
        .map(|i| {
            let env = postroom_core::Envelope::builder("order.created", "tests")
                .data(serde_json::json!({ "n": i }))
                .build();
            OutgoingMessage::from_envelope(&env, "order.created")
        })
        .collect();
    for r in publisher.publish_batch(&messages).await {
        r.unwrap();
    }
    let handled = || probes.iter().map(|p| p.calls().len()).sum::<usize>();
    assert!(
        eventually(Duration::from_secs(30), || async { handled() >= 30 }).await,
        "all 30 handled ({} so far)",
        handled()
    );
    for r in running {
        r.stop().await;
    }
    let per_partition: Vec<usize> = probes.iter().map(|p| p.calls().len()).collect();
    let used = per_partition.iter().filter(|&&c| c > 0).count();
    assert!(
        used >= 2,
        "messages without an aggregate spread over the partitions: {per_partition:?}"
    );
}

/// A handler keeping the last applied version per aggregate, guarded by `check_version`.
struct Guarded {
    last: Mutex<HashMap<String, u64>>,
    applied: Mutex<Vec<(String, u64)>>,
    duplicates: Mutex<u32>,
}

#[postroom_core::async_trait]
impl Handler for Guarded {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let agg = &m.envelope.aggregate;
        let key = agg.key();
        let mut last = self.last.lock().unwrap();
        let decision = check_version(last.get(&key).copied(), agg.version, 1);
        match decision {
            VersionDecision::Apply => {
                last.insert(key.clone(), agg.version);
                self.applied.lock().unwrap().push((key, agg.version));
                Ok(Handled::Applied)
            }
            VersionDecision::AlreadyApplied => {
                *self.duplicates.lock().unwrap() += 1;
                Ok(Handled::Duplicate)
            }
            VersionDecision::Gap { .. } => {
                Err(decision.gap_error(&key).expect("a gap has an error"))
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_guard_applies_out_of_order_versions_in_order() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("vg", &["order.created"]).await;
    let publisher = t.publisher();
    let handler = Arc::new(Guarded {
        last: Mutex::default(),
        applied: Mutex::default(),
        duplicates: Mutex::default(),
    });
    let mut cfg = postroom_core::ConsumerConfig::new(
        "vg",
        postroom_core::EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.retry = policy("1s", 6);
    cfg.concurrency = 1;
    cfg.breaker.failure_threshold = 0;
    let consumer = postroom_core::Consumer::new(cfg, handler.clone());
    let sub = t.subscriber("vg", 1, publisher.clone());
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move { consumer.run(sub, rx).await });

    let envs: HashMap<u64, postroom_core::Envelope> = (1..=5).map(|v| (v, order("g", v))).collect();
    for v in [3, 1, 5, 2, 4, 2] {
        publisher
            .publish(&OutgoingMessage::from_envelope(&envs[&v], "order.created"))
            .await
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(30), || async {
            handler.applied.lock().unwrap().len() == 5
        })
        .await
    );
    // A stale version arriving late is acknowledged as a duplicate and changes nothing.
    publisher
        .publish(&OutgoingMessage::from_envelope(&envs[&1], "order.created"))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            *handler.duplicates.lock().unwrap() >= 2
        })
        .await
    );
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the consumer loop stops within 30 s of its shutdown")
        .expect("the consumer loop ends without a panic");
    let applied: Vec<u64> = handler
        .applied
        .lock()
        .unwrap()
        .iter()
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(
        applied,
        vec![1, 2, 3, 4, 5],
        "applied in version order, each once"
    );
    assert_eq!(
        handler.last.lock().unwrap()["order:g"],
        5,
        "never rolled back"
    );
}
