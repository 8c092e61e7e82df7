//! Topology against the real broker: apply creates everything with policies (not
//! x-arguments), the management API shows the policies in force, and a second plan is empty.

mod common;

use common::{TestRabbit, eventually};
use postroom_rabbitmq::management::QueueInfo;
use std::time::Duration;

/// The queue once the broker shows a policy on it (policies apply asynchronously).
async fn with_policy(t: &TestRabbit, name: &str) -> QueueInfo {
    assert!(
        eventually(Duration::from_secs(15), || async {
            t.api
                .queue(name)
                .await
                .unwrap()
                .is_some_and(|q| q.policy.is_some())
        })
        .await,
        "policy applied to {name}"
    );
    t.api.queue(name).await.unwrap().unwrap()
}
use postroom_rabbitmq::{Change, RetryStyle};

#[tokio::test]
async fn apply_creates_everything_and_plan_is_then_empty() {
    let t = TestRabbit::new("1s,2s").await;
    t.configure(|c| {
        *c = c
            .clone()
            .with_consumer("inventory", &["order.created", "order.cancelled"])
    });
    let topo = t.topology();
    let plan = topo.plan().await.unwrap();
    assert!(
        plan.iter()
            .any(|c| matches!(c, Change::CreateQueue(q) if q.name.ends_with(".inventory"))),
        "{plan:#?}"
    );
    assert!(!plan.iter().any(Change::is_conflict));
    let applied = topo.apply().await.unwrap();
    assert_eq!(applied, plan);

    let n = topo.names("inventory");
    let work = with_policy(&t, &n.work_queue).await;
    assert_eq!(work.kind, "quorum");
    assert_eq!(
        work.arguments.len(),
        1,
        "only x-queue-type as an argument: {:?}",
        work.arguments
    );
    assert_eq!(
        work.policy.as_deref(),
        Some(format!("postroom:{}", n.work_queue).as_str())
    );
    let eff = &work.effective_policy_definition;
    assert_eq!(eff["dead-letter-exchange"], n.dlx_exchange.as_str());
    assert_eq!(eff["dead-letter-strategy"], "at-least-once");
    assert_eq!(eff["overflow"], "reject-publish");
    assert_eq!(eff["delivery-limit"], 5);

    for (stage, ttl) in [("1s", 1000), ("2s", 2000)] {
        let q = with_policy(&t, &format!("{}.retry.{stage}", n.work_queue)).await;
        assert_eq!(q.kind, "quorum");
        assert_eq!(
            q.effective_policy_definition["message-ttl"], ttl,
            "one TTL per stage queue"
        );
        assert_eq!(
            q.effective_policy_definition["dead-letter-exchange"],
            n.retry_exchange.as_str()
        );
        assert_eq!(
            q.effective_policy_definition["dead-letter-routing-key"],
            n.work_queue.as_str()
        );
    }
    let parking = with_policy(&t, &n.parking_queue).await;
    assert_eq!(
        parking.effective_policy_definition["overflow"],
        "reject-publish"
    );

    let exchanges = t.api.exchanges().await.unwrap();
    let kind = |name: &str| {
        exchanges
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.kind.clone())
    };
    assert_eq!(kind(&t.cfg().exchange).as_deref(), Some("topic"));
    assert_eq!(kind(&n.retry_exchange).as_deref(), Some("direct"));
    assert_eq!(kind(&n.dlx_exchange).as_deref(), Some("direct"));

    assert_eq!(
        topo.plan().await.unwrap(),
        Vec::<Change>::new(),
        "up to date after apply"
    );
}

#[tokio::test]
async fn plan_sees_drift_and_apply_repairs_it() {
    let t = TestRabbit::new("1s,2s").await;
    let topo = t.add_consumer("inv", &["a.b"]).await;
    let n = topo.names("inv");
    // An operator deletes a stage binding and edits a policy by hand.
    let b = t
        .api
        .bindings()
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.source == n.retry_exchange && b.routing_key == "1s")
        .unwrap();
    t.api.unbind(&b).await.unwrap();
    let mut p = t
        .api
        .policies()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == format!("postroom:{}", n.work_queue))
        .unwrap();
    p.definition
        .insert("delivery-limit".into(), serde_json::json!(99));
    t.api.put_policy(&p).await.unwrap();
    let plan = topo.plan().await.unwrap();
    assert_eq!(plan.len(), 2, "{plan:#?}");
    topo.apply().await.unwrap();
    assert!(topo.plan().await.unwrap().is_empty());

    // Removing a binding key from the configuration removes the binding; a shorter ladder
    // removes the stage policy and reports the stage queue as stale instead of deleting it.
    t.configure(|c| {
        *c = c.clone().with_consumer("inv", &[]);
        c.ladder = "1s".parse().unwrap();
    });
    let plan = t.topology().plan().await.unwrap();
    assert!(
        plan.iter()
            .any(|c| matches!(c, Change::RemoveBinding(b) if b.routing_key == "a.b")),
        "{plan:#?}"
    );
    assert!(
        plan.iter()
            .any(|c| matches!(c, Change::RemovePolicy(p) if p.ends_with(".retry.2s"))),
        "{plan:#?}"
    );
    assert!(
        plan.iter()
            .any(|c| matches!(c, Change::StaleQueue(q) if q.ends_with(".retry.2s"))),
        "{plan:#?}"
    );
}

#[tokio::test]
async fn reject_dlx_style_dead_letters_work_queue_into_the_stage() {
    let t = TestRabbit::new("1s").await;
    t.configure(|c| c.retry_style = RetryStyle::RejectDlx);
    let topo = t.add_consumer("rj", &["k"]).await;
    let n = topo.names("rj");
    let work = with_policy(&t, &n.work_queue).await;
    assert_eq!(
        work.effective_policy_definition["dead-letter-exchange"],
        n.retry_exchange.as_str()
    );
    assert_eq!(
        work.effective_policy_definition["dead-letter-routing-key"],
        "1s"
    );
    assert!(topo.plan().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_queue_with_hard_coded_arguments_is_a_conflict() {
    let t = TestRabbit::new("1s").await;
    t.configure(|c| *c = c.clone().with_consumer("cf", &["k"]));
    let n = t.cfg().names("cf");
    let mut args = serde_json::Map::new();
    args.insert("x-queue-type".into(), "quorum".into());
    args.insert("x-message-ttl".into(), 1000.into());
    t.api.declare_queue(&n.work_queue, args).await.unwrap();
    let err = t.topology().apply().await.unwrap_err();
    assert!(err.to_string().contains("CONFLICT queue"), "{err}");
}

#[tokio::test]
async fn deleting_a_workload_removes_its_unprefixed_work_exchange_once_no_other_uses_it() {
    // Two workloads on one work exchange that carries no prefix (like the default `orders`).
    let exchange = format!("orders-{}", common::rand_suffix());
    let a = TestRabbit::new("1s").await;
    a.configure(|c| c.exchange = exchange.clone());
    a.add_consumer("inventory", &["order.created"]).await;
    let b = TestRabbit::new("1s").await;
    b.configure(|c| c.exchange = exchange.clone());
    b.add_consumer("shipping", &["order.created"]).await;
    let has_exchange = || async {
        a.api
            .exchanges()
            .await
            .unwrap()
            .iter()
            .any(|e| e.name == exchange)
    };
    let queues_of = |prefix: String| {
        let api = a.api.clone();
        async move {
            api.queues()
                .await
                .unwrap()
                .iter()
                .filter(|q| q.name.starts_with(&format!("{prefix}.")))
                .count()
        }
    };
    assert!(has_exchange().await);

    // The first workload goes: its queues do, the shared exchange stays for the other.
    assert!(a.topology().delete().await.unwrap() > 0);
    assert_eq!(queues_of(a.prefix.clone()).await, 0);
    assert!(queues_of(b.prefix.clone()).await > 0);
    assert!(has_exchange().await, "still used by the other workload");

    // The last one goes: the work exchange goes with it.
    b.topology().delete().await.unwrap();
    assert_eq!(queues_of(b.prefix.clone()).await, 0);
    assert!(
        !has_exchange().await,
        "the unprefixed work exchange was left behind"
    );
}
