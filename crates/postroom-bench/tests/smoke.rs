//! Smoke test: the harness runs every scenario end to end against the real servers with tiny
//! sizes and writes a JSON report with every measurement and a finite ratio. It asserts no
//! speed (figures from a smoke run mean nothing); it proves the harness works. A missing
//! server fails the test, it is never skipped.

use std::process::Command;

const EXPECTED: [&str; 31] = [
    "relay_pg_to_rabbitmq",
    "consumer_inbox_pg",
    "consumer_inbox_pg_batched",
    "embedded_relay_sqlite",
    "embedded_consumer_sqlite",
    "latency_e2e_p99",
    "retry_lateness_p99",
    "scheduled_lateness_p99",
    "hot_loop_cpu",
    "hot_loop_deliveries",
    "memory_relay_rss",
    "memory_consumer_rss",
    "pg_relay_1conn",
    "pg_relay_8conn",
    "pg_consumer_1conn",
    "pg_consumer_8conn",
    "pg_produce_batched_1conn",
    "pg_produce_batched_8conn",
    "relay_pg_to_nats",
    "consumer_inbox_pg_nats",
    "relay_pg_to_sqs",
    "consumer_inbox_sqs",
    "relay_pg_to_kafka",
    "consumer_inbox_pg_kafka",
    "e2e_outbox_per_message",
    "e2e_outbox_per_message_transaction",
    "e2e_outbox_batched",
    "e2e_per_message_latency_p50",
    "e2e_per_message_latency_p99",
    "e2e_batched_latency_p50",
    "e2e_batched_latency_p99",
];

#[test]
fn every_scenario_reports_a_finite_ratio() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let json = dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_postroom-bench"))
        .args(["--quick", "--messages", "200", "--latency-secs", "1"])
        .args([
            "--retries",
            "100",
            "--outage-secs",
            "2",
            "--outage-messages",
            "50",
        ])
        .args(["--backlog", "1000", "--memory-secs", "2", "--json"])
        .arg(&json)
        .output()
        .expect("run postroom-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "postroom-bench failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("JSON written")).expect("valid JSON");
    assert_eq!(report["failures"], serde_json::json!([]), "{report:#}");
    let results = report["results"].as_array().expect("results");
    for name in EXPECTED {
        let m = results
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {report:#}"));
        let ratio = m["ratio"].as_f64().unwrap_or(f64::NAN);
        assert!(ratio.is_finite(), "{name}: ratio {ratio} in {m:#}");
        for key in [
            "postroom",
            "baseline",
            "unit",
            "target",
            "payload_bytes",
            "concurrency",
            "prefetch",
            "batch_size",
            "cores",
        ] {
            assert!(!m[key].is_null(), "{name}: no {key} in {m:#}");
        }
    }
    assert!(stdout.contains("measurement"), "the table is printed");
}

#[test]
fn absurd_flag_values_are_refused_before_anything_runs() {
    for args in [
        ["--latency-rate", "1e-30"],
        ["--retry-rate", "NaN"],
        ["--latency-secs", "1e300"],
        ["--payload-bytes", "18446744073709551615"],
        ["--messages", "0"],
        ["--backlog", "999999999999"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_postroom-bench"))
            .args(args)
            .output()
            .expect("run postroom-bench");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("invalid value") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}
