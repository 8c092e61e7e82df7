//! The CLI on NATS JetStream: topology plan/apply over the JetStream API (an update made in
//! place, a conflict refused), and the demo with its invariants, its relay publishing with
//! `Nats-Msg-Id` = the message id, and parking ingest, list and redrive through the parking
//! stream (a copy the consumer parked, and one the server gave up on). The shared server
//! (`POSTROOM_TEST_NATS`); a missing one fails.

mod common;

use common::daemon::wait_for;
use common::nats::{NatsWorkload, connect, prefix, url as nats};
use common::parking::{CONSUMER, ParkingPlace, commands_ingest_list_and_redrive, publish_corrupt};
use common::{broker_demo, check_broker_demo, postroom, postroom_async};
use postroom_core::{Delivery, Subscriber};
use postroom_nats::topology::reset::delete_workload;
use std::path::Path;
use std::time::Duration;

/// Run `postroom` off the async runtime; returns (success, stdout, stderr).
async fn run(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = postroom_async(dir, args).await;
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn plan(dir: &Path) -> String {
    let (done, out, err) = run(dir, &["topology", "plan", "--broker", &nats()]).await;
    assert!(done, "plan failed:\n{out}\n{err}");
    out
}

fn topology(dir: &Path, prefix: &str, extra: &str) {
    std::fs::write(
        dir.join("topology.toml"),
        format!(
            "prefix = \"{prefix}\"\nladder = \"5s,30s,5m\"\n{extra}\n\
             [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\"]\n"
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn topology_plan_apply_update_and_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = prefix("t");
    topology(d, &p, "ack_wait = \"10s\"");

    let first = plan(d).await;
    for needle in [
        format!("create stream {p} "),
        format!("create stream {p}_parking_inventory "),
        format!("create durable {p}/inventory__"),
        format!("create durable {p}/inventory__direct"),
        format!("create durable {p}_parking_inventory/ingest"),
    ] {
        assert!(first.contains(&needle), "{needle} in plan:\n{first}");
    }
    let (done, applied, err) = run(d, &["topology", "apply", "--yes", "--broker", &nats()]).await;
    assert!(done, "{applied}\n{err}");
    assert!(applied.contains("applied 5 change(s)"), "{applied}");
    assert!(plan(d).await.contains("nothing to do"));

    // What the server now has: the work stream on the workload's subjects, a durable per
    // route with the file's ack wait.
    let conn = connect().await;
    let mut stream = conn.jetstream().get_stream(&p).await.unwrap();
    let info = stream.info().await.unwrap();
    assert!(
        info.config.subjects.contains(&format!("{p}.>")),
        "{:?}",
        info.config.subjects
    );
    assert!(
        info.config.duplicate_window.as_secs() > 0,
        "a Nats-Msg-Id window"
    );

    // A changed limit is an update made in place.
    topology(d, &p, "ack_wait = \"20s\"");
    let update = plan(d).await;
    assert!(
        update.contains("update durable") && update.contains("ack_wait"),
        "{update}"
    );
    assert!(!update.contains("CONFLICT"), "{update}");
    let (done, out, err) = run(d, &["topology", "apply", "--yes", "--broker", &nats()]).await;
    assert!(done, "{out}\n{err}");
    assert!(plan(d).await.contains("nothing to do"));

    // A change the server cannot make in place is a conflict: shown, and apply refuses it.
    topology(d, &p, "ack_wait = \"20s\"\nstorage = \"memory\"");
    let conflict = plan(d).await;
    assert!(conflict.contains("CONFLICT"), "{conflict}");
    let (done, out, err) = run(d, &["topology", "apply", "--yes", "--broker", &nats()]).await;
    assert!(!done, "apply refused: {out}");
    assert!(err.contains("CONFLICT"), "{err}");
    topology(d, &p, "ack_wait = \"20s\"");
    assert!(plan(d).await.contains("nothing to do"), "nothing changed");

    // A key NATS does not know is refused by name.
    topology(d, &p, "exchange = \"orders\"");
    let (done, _, err) = run(d, &["topology", "plan", "--broker", &nats()]).await;
    assert!(!done && err.contains("exchange"), "{err}");

    delete_workload(&conn, &p).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_on_nats() {
    let p = prefix("demo");
    let r = broker_demo(&nats(), &p, &[], Vec::new()).await;
    check_broker_demo(
        &r,
        "corrupt JSON, unknown schema version, the failure that outlasts the budget",
    );
    assert!(r["duplicates_absorbed"].as_u64().unwrap() >= 3);
    assert_eq!(r["killed_order_redelivered"], true);

    // The relay published every copy with Nats-Msg-Id = its message id (the stream's
    // deduplication key).
    let conn = connect().await;
    let stream = conn.jetstream().get_stream(&p).await.unwrap();
    let first = stream.get_raw_message(1).await.unwrap();
    let id = first
        .headers
        .get("x-message-id")
        .expect("message id header");
    let key = first.headers.get("Nats-Msg-Id").expect("Nats-Msg-Id");
    assert_eq!(key.as_str(), id.as_str());
    delete_workload(&conn, &p).await.unwrap();
}

#[test]
fn a_nats_url_without_a_server_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    topology(d, "nobody", "");
    let out = postroom(d, &["topology", "plan", "--broker", "nats://127.0.0.1:1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NATS"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn parking_ingest_list_and_redrive_through_nats() {
    common::parking::ingest_list_and_redrive::<NatsWorkload>().await;
}

/// A copy its consumer took twice and never settled (as a consumer that dies on it would):
/// the server gives up at `max_deliver` and publishes a MAX_DELIVERIES advisory, which the
/// parking stream captures. `postroom parking ingest` turns the advisory into a parked
/// record (`max_deliveries`) and removes the message from the work stream; list and redrive
/// then work as for a copy the consumer parked.
#[tokio::test(flavor = "multi_thread")]
async fn parking_ingest_of_a_copy_the_server_gave_up_on_through_nats() {
    let dir = tempfile::tempdir().unwrap();
    let place = NatsWorkload::start_with(dir.path(), "adv", Some((1, 2))).await;
    let id = publish_corrupt(place.publisher().as_ref()).await;
    let mut sub = place.subscribe(1).await;
    for k in 1..=2 {
        let mut taken = None;
        for _ in 0..30 {
            taken = sub.next(Duration::from_secs(1)).await.unwrap();
            if taken.is_some() {
                break;
            }
        }
        let d = taken.unwrap_or_else(|| panic!("delivery {k} within 30 s"));
        assert_eq!(d.message().deliveries, Some(k));
        drop(d);
    }
    // The subscriber keeps a pull request outstanding, so the server advertises the limit.
    let parking = postroom_nats::naming::parking_stream(&place.prefix, CONSUMER);
    wait_for(
        Duration::from_secs(30),
        "the MAX_DELIVERIES advisory captured in the parking stream",
        || async { place.stream_messages(&parking).await == 1 },
    )
    .await;
    sub.close().await;
    drop(sub);
    let work = place
        .conn
        .jetstream()
        .get_stream(postroom_nats::naming::work_stream(&place.prefix))
        .await
        .unwrap();
    let original = work.get_raw_message(1).await.unwrap();
    assert_eq!(
        original.headers.get("x-message-id").map(|v| v.as_str()),
        Some(id.to_string().as_str()),
        "the work stream's first message is the one the server gave up on"
    );
    commands_ingest_list_and_redrive(dir.path(), &place, id, "max_deliveries").await;
    // Removed from the work stream once the parking store had it (the redriven copy is a
    // message of its own).
    let gone = work.get_raw_message(1).await.map(|_| ()).unwrap_err();
    assert!(
        gone.to_string().contains("no message found"),
        "the original removed from the work stream: {gone}"
    );
    place.close().await;
}
