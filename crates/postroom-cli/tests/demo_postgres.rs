//! `postroom demo --database postgres://…`: the same demo, same invariants, on a real
//! PostgreSQL (a fresh database per run; a missing server fails the test).

mod common;

use common::FreshPg;
use std::process::Command;

#[tokio::test]
async fn demo_on_postgres() {
    let db = FreshPg::create("demo").await;
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir.path())
        .args(["demo", "--database", &url, "--report-json"])
        .arg(&report)
        .output()
        .expect("run postroom demo");
    assert!(
        out.status.success(),
        "demo failed\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["lost"], 0);
    assert_eq!(r["duplicate_effects"], 0);
    assert_eq!(r["parked"], 3);
    assert_eq!(r["killed_order_reservations"], 1);
    assert_eq!(r["failures"].as_array().unwrap().len(), 0);
    let list = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .args([
            "parking",
            "list",
            "--database",
            &url,
            "--table-prefix",
            "postroom_demo_",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&list.stdout).lines().count(), 3);
    db.drop_db().await;
}
