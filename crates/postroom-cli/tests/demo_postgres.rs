//! `postroom demo --database postgres://…`: the same demo, same invariants, on a real
//! PostgreSQL (a fresh database per run; a missing server fails the test).

mod common;

use common::{TestDb, json_lines, ok, postroom, run_for_report};

#[tokio::test]
async fn demo_on_postgres() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().unwrap();
    let r = run_for_report(
        dir.path(),
        &["demo", "--database", &db.url, "--report-json", "r.json"],
        "r.json",
    )
    .await;
    assert_eq!(r["lost"], 0);
    assert_eq!(r["duplicate_effects"], 0);
    assert_eq!(r["parked"], 3);
    assert_eq!(r["killed_order_reservations"], 1);
    assert_eq!(r["failures"].as_array().unwrap().len(), 0);
    let list = ok(&postroom(
        dir.path(),
        &[
            "parking",
            "list",
            "--database",
            &db.url,
            "--table-prefix",
            "postroom_demo_",
            "--json",
        ],
    ));
    assert_eq!(json_lines(&list).len(), 3);
}
