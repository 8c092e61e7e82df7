//! `postroom demo` end to end, as a user runs it: the binary, its child consumer process
//! killed with SIGKILL, the JSON report; then the operator's view of what it parked.

mod common;

use common::{json_file, json_lines, ok, postroom, postroom_cmd};

#[test]
fn demo_reports_no_loss_and_no_double_effect() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stdout = ok(&postroom(d, &["demo", "--report-json", "r.json"]));
    let r = json_file(&d.join("r.json"));
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

    // The parked messages are there for the operator, payloads redacted by default…
    let db = ["--database", "postroom-demo.db"];
    let list = |extra: &[&str]| {
        let args: Vec<&str> = ["parking", "list"]
            .iter()
            .chain(&db)
            .chain(extra)
            .copied()
            .collect();
        json_lines(&ok(&postroom(d, &args)))
    };
    let lines = list(&["--json"]);
    assert_eq!(lines.len(), 3);
    assert!(
        lines
            .iter()
            .all(|l| l["body"].as_str().unwrap().starts_with("<redacted"))
    );
    // …and capped when shown.
    for l in list(&["--json", "--show-payload", "--payload-limit", "12"]) {
        let body = l["body"].as_str().unwrap();
        assert!(body.contains("more bytes; --payload-limit"), "{body}");
        assert!(body.len() < 12 + 64, "{body}");
    }

    // Redrive the exhausted order: dry run changes nothing; then it goes back with the same id.
    let redrive = |extra: &[&str]| {
        let args: Vec<&str> = ["parking", "redrive"]
            .iter()
            .chain(&db)
            .chain(&["--error-code", "db_unavailable"])
            .chain(extra)
            .copied()
            .collect();
        postroom_cmd(d, &args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    assert!(ok(&redrive(&["--dry-run", "--json"])).contains("\"selected\":1"));
    assert_eq!(
        redrive(&[]).status.code(),
        Some(2),
        "no confirmation, no redrive"
    );
    assert!(ok(&redrive(&["--yes", "--rate", "20", "--json"])).contains("\"done\":1"));
}
