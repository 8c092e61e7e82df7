//! The CLI on Amazon SQS (the local endpoint): topology plan/apply from a topology file, and
//! the demo — a relay in one process, the inventory consumer in another that is killed with
//! SIGKILL between its COMMIT and its delete — with its invariants. Real endpoint; a missing
//! one fails.

mod common;

use common::{ok, sqs, workload};

#[tokio::test(flavor = "multi_thread")]
async fn topology_plan_apply_then_nothing_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("t");
    std::fs::write(
        dir.path().join("topology.toml"),
        format!(
            "prefix = \"{prefix}\"\nladder = \"5s,30s,5m\"\nvisibility_timeout = \"20s\"\nmax_receive_count = 6\n\
             [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\"]\n"
        ),
    )
    .unwrap();
    let d = dir.path().to_path_buf();
    let url = sqs::url();
    let (plan, apply, again) = tokio::task::spawn_blocking(move || {
        let plan = ok(&sqs::postroom(&d, &["topology", "plan", "--broker", &url]));
        let apply = ok(&sqs::postroom(
            &d,
            &["topology", "apply", "--yes", "--broker", &url],
        ));
        let again = ok(&sqs::postroom(&d, &["topology", "plan", "--broker", &url]));
        (plan, apply, again)
    })
    .await
    .unwrap();
    for needle in [
        format!("create queue {prefix}-inventory-dlq ("),
        format!("create queue {prefix}-inventory ("),
        "VisibilityTimeout=20".to_string(),
        "\"maxReceiveCount\":6".to_string(),
        "MessageRetentionPeriod=1209600".to_string(),
    ] {
        assert!(plan.contains(&needle), "{needle} in plan:\n{plan}");
    }
    assert!(apply.contains("applied 2 change(s)"), "{apply}");
    assert!(again.contains("nothing to do"), "{again}");
    sqs::cleanup(&prefix).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_in_the_url_are_refused_and_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("topology.toml"),
        "prefix = \"x\"\n[[consumers]]\nname = \"c\"\n",
    )
    .unwrap();
    let d = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        sqs::postroom(
            &d,
            &[
                "topology",
                "plan",
                "--broker",
                "sqs://AKIDEXAMPLE:wJalrXUtnFEMIsecret@127.0.0.1:5000",
            ],
        )
    })
    .await
    .unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("demo");
    let r = sqs::run_for_report(
        dir.path(),
        &[
            "demo",
            "--broker",
            &sqs::url(),
            "--workload",
            &prefix,
            "--report-json",
            "r.json",
        ],
        "r.json",
    )
    .await;
    assert_eq!(r["lost"], 0, "{r}");
    assert_eq!(r["duplicate_effects"], 0, "{r}");
    assert_eq!(r["parked"], 3, "ingested from the DLQ into the store: {r}");
    assert_eq!(r["killed_order_reservations"], 1, "{r}");
    assert_eq!(r["failures"].as_array().unwrap().len(), 0, "{r}");
    sqs::cleanup(&prefix).await;
}
