//! The CLI on RabbitMQ: topology plan/apply through the management API, the demo with its
//! invariants, and parking ingest, list and redrive through the broker. Real servers; a
//! missing one fails.

mod common;

use common::rabbit::RabbitWorkload;
use common::{amqp, cleanup, management_api, ok, postroom, run_for_report, workload};

#[tokio::test(flavor = "multi_thread")]
async fn topology_plan_apply_then_nothing_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("t");
    std::fs::write(
        dir.path().join("topology.toml"),
        format!(
            "prefix = \"{prefix}\"\nexchange = \"{prefix}.orders\"\nladder = \"5s,30s,5m\"\n\
             [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\"]\n"
        ),
    )
    .unwrap();
    let d = dir.path().to_path_buf();
    let url = amqp();
    let (plan, apply, again, json) = tokio::task::spawn_blocking(move || {
        let plan = ok(&postroom(&d, &["topology", "plan", "--broker", &url]));
        let apply = ok(&postroom(
            &d,
            &["topology", "apply", "--yes", "--broker", &url],
        ));
        let again = ok(&postroom(&d, &["topology", "plan", "--broker", &url]));
        let json = ok(&postroom(
            &d,
            &["topology", "plan", "--json", "--broker", &url],
        ));
        (plan, apply, again, json)
    })
    .await
    .unwrap();
    for needle in [
        format!("create queue {prefix}.inventory "),
        format!("create queue {prefix}.inventory.retry.5s"),
        format!("create queue {prefix}.inventory.retry.30s"),
        format!("create queue {prefix}.inventory.retry.5m"),
        format!("create queue {prefix}.inventory.parking"),
        format!("create exchange {prefix}.inventory.retry (direct)"),
        format!("create exchange {prefix}.inventory.dlx (direct)"),
        "set policy".to_string(),
    ] {
        assert!(plan.contains(&needle), "{needle} in plan:\n{plan}");
    }
    assert!(apply.contains("applied"), "{apply}");
    assert!(again.contains("nothing to do"), "{again}");
    assert!(json.trim().is_empty(), "{json}");
    // The policies are applied to the right queues.
    let api = management_api();
    let mut seen = None;
    for _ in 0..40 {
        if let Some(q) = api
            .queue(&format!("{prefix}.inventory.retry.30s"))
            .await
            .unwrap()
            && q.policy.is_some()
        {
            seen = Some(q);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let q = seen.expect("the retry stage queue has its policy");
    let def = serde_json::to_string(&q.effective_policy_definition).unwrap();
    assert!(def.contains("\"message-ttl\":30000"), "{def}");
    assert!(def.contains("dead-letter-exchange"), "{def}");
    cleanup(&prefix).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_on_rabbitmq() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("demo");
    let r = run_for_report(
        dir.path(),
        &[
            "demo",
            "--broker",
            &amqp(),
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
        "ingested from the parking queue into the store"
    );
    assert_eq!(r["killed_order_reservations"], 1);
    assert_eq!(r["failures"].as_array().unwrap().len(), 0);
    cleanup(&format!("{prefix}.")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn parking_ingest_list_and_redrive_through_rabbitmq() {
    let dir = tempfile::tempdir().unwrap();
    let place = RabbitWorkload::start(dir.path(), "t").await;
    common::parking::ingest_list_and_redrive(dir.path(), &place).await;
    place.close().await;
}
