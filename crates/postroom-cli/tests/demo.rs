//! `postroom demo` end to end, as a user runs it: the binary, its child consumer process
//! killed with SIGKILL, and the JSON report.

use std::process::Command;

#[test]
fn demo_reports_no_loss_and_no_double_effect() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir.path())
        .args(["demo", "--report-json"])
        .arg(&report)
        .output()
        .expect("run postroom demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["orders"], 40);
    assert_eq!(r["lost"], 0);
    assert_eq!(r["duplicate_effects"], 0);
    assert_eq!(
        r["rejected"], 3,
        "two RARE orders and the GADGET order are out of stock"
    );
    assert_eq!(
        r["reserved"].as_u64().unwrap() + r["rejected"].as_u64().unwrap() + 1,
        40,
        "every other order is reserved; one is parked"
    );
    assert_eq!(
        r["parked"], 3,
        "corrupt JSON, unknown schema version, and the order whose failure outlasts the budget"
    );
    let codes: Vec<&str> = r["parked_messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["code"].as_str().unwrap())
        .collect();
    for code in ["malformed", "unknown_schema_version", "db_unavailable"] {
        assert!(codes.contains(&code), "{code} parked: {codes:?}");
    }
    for stage in ["1s", "2s", "4s"] {
        assert!(
            r["retries_by_stage"][stage].as_u64().unwrap() >= 1,
            "a retry went through stage {stage}"
        );
    }
    assert!(r["duplicates_absorbed"].as_u64().unwrap() >= 3);
    assert_eq!(r["consumer_kills"], 1);
    assert_eq!(r["killed_order_reservations"], 1);
    assert_eq!(r["killed_order_redelivered"], true);
    assert_eq!(
        r["cancelled"], 2,
        "cancellations applied after their orders (version guard)"
    );
    assert_eq!(r["order_violations"], 0);
    assert_eq!(r["failures"].as_array().unwrap().len(), 0);
    assert!(stdout.contains("all invariants hold"));

    // The parked messages are there for the operator, payloads redacted by default.
    let list = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir.path())
        .args([
            "parking",
            "list",
            "--database",
            "postroom-demo.db",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(list.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(
        lines
            .iter()
            .all(|l| l["body"].as_str().unwrap().starts_with("<redacted"))
    );

    // Redrive the exhausted order: dry run changes nothing; then it goes back with the same id.
    let dry = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir.path())
        .args([
            "parking",
            "redrive",
            "--database",
            "postroom-demo.db",
            "--error-code",
            "db_unavailable",
            "--dry-run",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(dry.status.success());
    assert!(String::from_utf8_lossy(&dry.stdout).contains("\"selected\":1"));
    let no_yes = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir.path())
        .args([
            "parking",
            "redrive",
            "--database",
            "postroom-demo.db",
            "--error-code",
            "db_unavailable",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(no_yes.status.code(), Some(2), "no confirmation, no redrive");
    let go = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir.path())
        .args([
            "parking",
            "redrive",
            "--database",
            "postroom-demo.db",
            "--error-code",
            "db_unavailable",
            "--yes",
            "--rate",
            "20",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        go.status.success(),
        "{}",
        String::from_utf8_lossy(&go.stderr)
    );
    assert!(String::from_utf8_lossy(&go.stdout).contains("\"done\":1"));
}
