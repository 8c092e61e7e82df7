//! The CLI on Kafka: topology plan/apply creating the workload's topics (routes, retry stages,
//! redrive, parking, delivery ledger), and the demo with its invariants. Real broker; a
//! missing one fails.

mod common;

use common::{broker_demo, check_broker_demo, kafka, kafka_cleanup, plan_apply_plan, workload};

#[tokio::test(flavor = "multi_thread")]
async fn topology_plan_apply_then_nothing_to_do() {
    let t = plan_apply_plan(
        "ladder = \"5s,30s\"\n\
         [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\", \"order.*\"]\n",
        &format!("{}?partitions=3", kafka()),
        Vec::new(),
    )
    .await;
    t.check(
        &[
            "create topic {prefix}.order.created (partitions 3",
            "create topic {prefix}.inventory.retry.5s (partitions 3",
            "create topic {prefix}.inventory.retry.30s (partitions 3",
            "create topic {prefix}.inventory.redrive (partitions 3",
            "create topic {prefix}.inventory.parking (partitions 3",
            "create topic {prefix}.inventory.deliveries (partitions 1, replication 1, cleanup.policy=compact)",
        ],
        "applied",
    );
    let prefix = &t.prefix;
    assert!(
        !t.plan.contains(&format!("{prefix}.order.*")),
        "a pattern creates no topic:\n{}",
        t.plan
    );
    kafka_cleanup(&format!("{prefix}.")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_on_kafka() {
    let prefix = workload("demo");
    let r = broker_demo(&kafka(), &prefix, &[], Vec::new()).await;
    check_broker_demo(&r, "ingested from the parking topic into the store");
    kafka_cleanup(&format!("{prefix}.")).await;
}
