//! The CLI on RabbitMQ: topology plan/apply through the management API, the demo with its
//! invariants, and parking ingest, list and redrive through the broker. Real servers; a
//! missing one fails.

mod common;

use common::rabbit::RabbitWorkload;
use common::{
    amqp, broker_demo, check_broker_demo, cleanup, management_api, ok, plan_apply_plan,
    postroom_async, workload,
};

#[tokio::test(flavor = "multi_thread")]
async fn topology_plan_apply_then_nothing_to_do() {
    let url = amqp();
    let t = plan_apply_plan(
        "exchange = \"{prefix}.orders\"\nladder = \"5s,30s,5m\"\n\
         [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\"]\n",
        &url,
        Vec::new(),
    )
    .await;
    let prefix = &t.prefix;
    let json = ok(&postroom_async(
        t.dir.path(),
        &["topology", "plan", "--json", "--broker", &url],
    )
    .await);
    t.check(
        &[
            "create queue {prefix}.inventory ",
            "create queue {prefix}.inventory.retry.5s",
            "create queue {prefix}.inventory.retry.30s",
            "create queue {prefix}.inventory.retry.5m",
            "create queue {prefix}.inventory.parking",
            "create exchange {prefix}.inventory.retry (direct)",
            "create exchange {prefix}.inventory.dlx (direct)",
            "set policy",
        ],
        "applied",
    );
    assert!(json.trim().is_empty(), "{json}");
    // The policies are applied to the right queues. The broker applies a policy in the
    // background, and another test of the suite may be restarting it meanwhile: up to 60 s.
    let api = management_api();
    let mut seen = None;
    for _ in 0..240 {
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
    cleanup(prefix).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_on_rabbitmq() {
    let prefix = workload("demo");
    let r = broker_demo(&amqp(), &prefix, &[], Vec::new()).await;
    check_broker_demo(&r, "ingested from the parking queue into the store");
    cleanup(&format!("{prefix}.")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn parking_ingest_list_and_redrive_through_rabbitmq() {
    common::parking::ingest_list_and_redrive::<RabbitWorkload>().await;
}
