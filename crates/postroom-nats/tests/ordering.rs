//! Per-key order on JetStream: topic subjects carry a partition word chosen by the aggregate
//! key, each partition is its own durable handing out one copy at a time (`max_ack_pending`
//! 1), so one delivery per partition is active across every consumer process, and a copy
//! waiting in a delayed nak holds its partition. Versions of an aggregate are applied in
//! order even when one of them is retried; the same workload without partitions applies the
//! retried version late (the control that shows the check can fail).

mod common;

use common::probe::{Mode, Probe, policy, run};
use common::{TestNats, eventually};
use postroom_core::{KeyOrdering, Ordering, Transport};
use postroom_testkit::cases::publish_versions;
use std::time::Duration;

/// The versions of each aggregate in the order they were applied (failed attempts left out).
fn applied_order(probe: &Probe, aggregates: &[&str]) -> Vec<Vec<u64>> {
    aggregates
        .iter()
        .map(|a| {
            probe
                .calls()
                .iter()
                .filter(|c| c.key == format!("order:{a}") && !(c.version == 3 && c.attempt == 0))
                .map(|c| c.version)
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_consumers_apply_each_aggregate_in_order_even_across_a_retry() {
    let nats = TestNats::new().await;
    let cfg = nats
        .config()
        .with_consumer("po", &["order.created"])
        .partitioned("po", 3)
        .with_consumer("pu", &["order.created"]);
    let transport = nats.transport(cfg);
    assert_eq!(transport.capabilities().ordering, KeyOrdering::Partitioned);
    let partitioned = Probe::new(Mode::FailVersionBelow(3, 1));
    let plain = Probe::new(Mode::FailVersionBelow(3, 1));
    // Two processes on the partitioned durables, one on the plain one.
    let mut running = Vec::new();
    for _ in 0..2 {
        running.push(
            run(
                &transport,
                "po",
                &["order.created"],
                partitioned.clone(),
                policy("1s", 3),
                4,
                Ordering::PerKey,
            )
            .await,
        );
    }
    running.push(
        run(
            &transport,
            "pu",
            &["order.created"],
            plain.clone(),
            policy("1s", 3),
            4,
            Ordering::PerKey,
        )
        .await,
    );
    let aggregates = ["a", "b", "c", "d", "e", "f"];
    publish_versions(transport.publisher().as_ref(), &aggregates, 1..=8).await;
    let total = aggregates.len() * 9; // 8 versions + one failed attempt of version 3
    assert!(
        eventually(Duration::from_secs(60), || async {
            partitioned.calls().len() >= total && plain.calls().len() >= total
        })
        .await,
        "every version handled by both consumers: partitioned {}, plain {} of {total}",
        partitioned.calls().len(),
        plain.calls().len()
    );
    for r in running {
        r.stop().await;
    }
    let want: Vec<u64> = (1..=8).collect();
    for (a, versions) in aggregates
        .iter()
        .zip(applied_order(&partitioned, &aggregates))
    {
        assert_eq!(
            versions, want,
            "partitioned: aggregate {a} applied in order"
        );
    }
    let broken = applied_order(&plain, &aggregates)
        .into_iter()
        .filter(|v| *v != want)
        .count();
    assert!(
        broken > 0,
        "without partitions a retried version is applied after its successors (the check can fail)"
    );
}
