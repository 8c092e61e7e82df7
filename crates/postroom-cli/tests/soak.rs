//! The short soak of the README's test command: 5,000 messages with a SIGKILL every 2 s, on
//! the embedded default and on PostgreSQL. Asserts on the JSON summary, which is read from
//! the databases and the parking store.

mod common;

use common::{TestDb, check_broker_soak, json_file, ok, postroom};

fn soak(dir: &std::path::Path, database: &str) -> serde_json::Value {
    ok(&postroom(
        dir,
        &[
            "soak",
            "--messages",
            "5000",
            "--kill-every",
            "2",
            "--timeout-secs",
            "300",
            "--database",
            database,
            "--json",
            "soak.json",
        ],
    ));
    json_file(&dir.join("soak.json"))
}

/// What every short soak must show (nothing lost or applied twice, order kept, only poison
/// parked, relays and consumers killed), and on top: poison really parked and the shop's
/// books right.
fn check(r: &serde_json::Value) {
    check_broker_soak(r);
    assert!(
        r["parked"].as_u64().unwrap() > 0,
        "poison was produced and parked"
    );
    assert_eq!(r["rejected"], r["out_of_stock_orders"]);
    assert_eq!(r["stock_consistent"], true);
    for key in ["broker_restarts", "elapsed_s", "throughput_msgs_per_s"] {
        assert!(r.get(key).is_some(), "{key} in the summary");
    }
}

#[test]
fn soak_embedded_default() {
    let dir = tempfile::tempdir().unwrap();
    check(&soak(dir.path(), "postroom-soak.db"));
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_postgres() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().unwrap();
    let (d, url) = (dir.path().to_path_buf(), db.url.clone());
    check(
        &tokio::task::spawn_blocking(move || soak(&d, &url))
            .await
            .unwrap(),
    );
}
