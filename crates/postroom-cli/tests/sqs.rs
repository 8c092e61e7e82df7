//! The CLI on Amazon SQS (the local endpoint): topology plan/apply from a topology file, and
//! the demo — a relay in one process, the inventory consumer in another that is killed with
//! SIGKILL between its COMMIT and its delete — with its invariants. Real endpoint; a missing
//! one fails.

mod common;

use common::{broker_demo, check_broker_demo, plan_apply_plan, postroom_async_env, sqs, workload};

#[tokio::test(flavor = "multi_thread")]
async fn topology_plan_apply_then_nothing_to_do() {
    let t = plan_apply_plan(
        "ladder = \"5s,30s,5m\"\nvisibility_timeout = \"20s\"\nmax_receive_count = 6\n\
         [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\"]\n",
        &sqs::url(),
        sqs::aws_env(),
    )
    .await;
    t.check(
        &[
            "create queue {prefix}-inventory-dlq (",
            "create queue {prefix}-inventory (",
            "VisibilityTimeout=20",
            "\"maxReceiveCount\":6",
            "MessageRetentionPeriod=1209600",
        ],
        "applied 2 change(s)",
    );
    sqs::cleanup(&t.prefix).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_in_the_url_are_refused_and_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("topology.toml"),
        "prefix = \"x\"\n[[consumers]]\nname = \"c\"\n",
    )
    .unwrap();
    let out = postroom_async_env(
        dir.path(),
        &[
            "topology",
            "plan",
            "--broker",
            "sqs://AKIDEXAMPLE:wJalrXUtnFEMIsecret@127.0.0.1:5000",
        ],
        sqs::aws_env(),
    )
    .await;
    assert!(!out.status.success());
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("no user or password"), "{all}");
    assert!(!all.contains("wJalrXUtnFEMIsecret"), "{all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_on_sqs() {
    let prefix = workload("demo");
    let r = broker_demo(&sqs::url(), &prefix, &[], sqs::aws_env()).await;
    check_broker_demo(&r, "ingested from the DLQ into the store");
    sqs::cleanup(&prefix).await;
}
