//! `plan` and `apply`: an applied topology plans nothing; a changed limit is an update made
//! in place; a change the server cannot make in place is a conflict and `apply` refuses it,
//! changing nothing.

mod common;

use common::TestNats;
use postroom_nats::{Change, Storage, Topology};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_apply_update_and_conflict() {
    let nats = TestNats::new().await;
    let cfg = nats
        .config()
        .with_consumer("inventory", &["order.created", "order.#"]);
    let topo = Topology::new(nats.conn.clone(), cfg.clone()).unwrap();
    let plan = topo.plan().await.unwrap();
    assert!(
        plan.iter()
            .all(|c| matches!(c, Change::CreateStream(_) | Change::CreateConsumer(_)))
    );
    // Work stream + parking stream; ingest + three route durables (order.#: order and order.>)
    // + the direct durable.
    assert_eq!(plan.len(), 2 + 1 + 3 + 1, "{plan:#?}");
    topo.apply().await.unwrap();
    assert!(
        topo.plan().await.unwrap().is_empty(),
        "up to date after apply"
    );

    let mut changed = cfg.clone();
    changed.ack_wait = Duration::from_secs(7);
    changed.max_ack_pending = 500;
    let topo = Topology::new(nats.conn.clone(), changed).unwrap();
    let plan = topo.plan().await.unwrap();
    assert_eq!(
        plan.len(),
        4,
        "each route and the direct durable: {plan:#?}"
    );
    for c in &plan {
        let Change::UpdateConsumer { differs, .. } = c else {
            panic!("an update of a consumer: {c:#?}");
        };
        assert_eq!(differs.len(), 2, "{differs:?}");
        assert!(differs[0].starts_with("ack_wait ") && differs[0].ends_with(" -> 7s"));
        assert!(differs[1].starts_with("max_ack_pending ") && differs[1].ends_with(" -> 500"));
    }
    topo.apply().await.unwrap();
    assert!(topo.plan().await.unwrap().is_empty());

    let mut conflicting = cfg.clone();
    conflicting.storage = Storage::Memory;
    let topo = Topology::new(nats.conn.clone(), conflicting).unwrap();
    let plan = topo.plan().await.unwrap();
    assert!(plan.iter().any(Change::is_conflict), "{plan:#?}");
    let err = topo.apply().await.unwrap_err();
    assert!(err.to_string().contains("CONFLICT"), "{err}");
    let back = Topology::new(nats.conn.clone(), cfg).unwrap();
    assert!(
        back.plan()
            .await
            .unwrap()
            .iter()
            .all(|c| !matches!(c, Change::CreateStream(_))),
        "a refused apply changed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_counts_ready_copies_and_their_age() {
    use postroom_core::Transport;
    let nats = TestNats::new().await;
    let transport = nats.transport(nats.config());
    common::bind_to_orders(&transport, "bl").await;
    common::publish_orders(transport.publisher().as_ref(), "b", 3).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let b = transport.backlog("bl").await.unwrap();
    assert_eq!((b.ready, b.unacked), (3, 0));
    let age = b.oldest_ready_age.expect("age of the oldest ready copy");
    assert!(age >= Duration::from_secs(1), "{age:?}");
}
