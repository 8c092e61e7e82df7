//! The CLI on Kafka: topology plan/apply creating the workload's topics (routes, retry stages,
//! redrive, parking, delivery ledger), and the demo with its invariants. Real broker; a
//! missing one fails.

mod common;

use common::{kafka, kafka_cleanup, ok, postroom, run_for_report, workload};

#[tokio::test(flavor = "multi_thread")]
async fn topology_plan_apply_then_nothing_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("t");
    std::fs::write(
        dir.path().join("topology.toml"),
        format!(
            "prefix = \"{prefix}\"\nladder = \"5s,30s\"\n\
             [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\", \"order.*\"]\n"
        ),
    )
    .unwrap();
    let d = dir.path().to_path_buf();
    let url = format!("{}?partitions=3", kafka());
    let (plan, apply, again) = tokio::task::spawn_blocking(move || {
        let plan = ok(&postroom(&d, &["topology", "plan", "--broker", &url]));
        let apply = ok(&postroom(
            &d,
            &["topology", "apply", "--yes", "--broker", &url],
        ));
        let again = ok(&postroom(&d, &["topology", "plan", "--broker", &url]));
        (plan, apply, again)
    })
    .await
    .unwrap();
    for needle in [
        format!("create topic {prefix}.order.created (partitions 3"),
        format!("create topic {prefix}.inventory.retry.5s (partitions 3"),
        format!("create topic {prefix}.inventory.retry.30s (partitions 3"),
        format!("create topic {prefix}.inventory.redrive (partitions 3"),
        format!("create topic {prefix}.inventory.parking (partitions 3"),
        format!(
            "create topic {prefix}.inventory.deliveries (partitions 1, replication 1, cleanup.policy=compact)"
        ),
    ] {
        assert!(plan.contains(&needle), "{needle} in plan:\n{plan}");
    }
    assert!(
        !plan.contains(&format!("{prefix}.order.*")),
        "a pattern creates no topic:\n{plan}"
    );
    assert!(apply.contains("applied"), "{apply}");
    assert!(again.contains("nothing to do"), "{again}");
    kafka_cleanup(&format!("{prefix}.")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_on_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("demo");
    let r = run_for_report(
        dir.path(),
        &[
            "demo",
            "--broker",
            &kafka(),
            "--workload",
            &prefix,
            "--report-json",
            "r.json",
        ],
        "r.json",
    )
    .await;
    assert_eq!(r["lost"], 0);
    assert_eq!(r["duplicate_effects"], 0);
    assert_eq!(
        r["parked"], 3,
        "ingested from the parking topic into the store"
    );
    assert_eq!(r["killed_order_reservations"], 1);
    assert_eq!(r["failures"].as_array().unwrap().len(), 0);
    kafka_cleanup(&format!("{prefix}.")).await;
}
