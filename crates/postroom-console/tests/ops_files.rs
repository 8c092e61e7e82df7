//! The Prometheus alert rules and the Grafana dashboard in `ops/`: the rules parse with
//! `promtool check rules`, and every metric a rule or a dashboard query names exists in
//! `postroom_core::metrics` or the console's own metrics.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every metric name postroom records: the string constants of the core's metrics module
/// and the console's.
fn known() -> BTreeSet<String> {
    let core = include_str!("../../postroom-core/src/metrics.rs");
    let mut names: BTreeSet<String> = core
        .split('"')
        .filter(|s| s.starts_with("postroom_") && !s.contains(' '))
        .map(str::to_string)
        .collect();
    assert!(names.len() > 20, "the core's metric names were not found");
    names.extend(postroom_console::metrics::ALL.iter().map(|s| s.to_string()));
    names
}

/// The `postroom_…` names in a PromQL expression.
fn names_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("postroom_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

fn exists(name: &str, known: &BTreeSet<String>) -> bool {
    known.contains(name)
        || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|base| known.contains(base))
        })
}

fn rule_exprs() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo().join("ops/prometheus/alerts.yml")).expect("alerts.yml");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("expr:").map(|e| e.trim().to_string()))
        .collect()
}

fn dashboard_exprs() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo().join("ops/grafana/postroom.json")).expect("dashboard");
    let v: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for p in v["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            out.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    out
}

#[test]
fn alert_rules_pass_promtool() {
    let path = repo().join("ops/prometheus/alerts.yml");
    let out = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&path)
        .output()
        .expect("promtool must be installed: bash scripts/services.sh tools");
    assert!(
        out.status.success(),
        "promtool check rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rules_and_dashboard_name_only_metrics_that_exist() {
    let known = known();
    let rules = rule_exprs();
    let dashboard = dashboard_exprs();
    assert!(rules.len() >= 4 && dashboard.len() >= 8);
    for expr in rules.iter().chain(&dashboard) {
        let names = names_in(expr);
        assert!(!names.is_empty(), "{expr} names no postroom metric");
        for n in names {
            assert!(
                exists(&n, &known),
                "{n} (in {expr}) is not a postroom metric"
            );
        }
    }
    // The alerts operators need: oldest message age, parking inflow, relay lag, breaker, the
    // WAL relay's slot lag.
    let all = rules.join("\n");
    for needed in [
        postroom_core::metrics::OLDEST_READY_AGE,
        postroom_core::metrics::PARKED,
        postroom_console::metrics::RELAY_LAG,
        postroom_core::metrics::BREAKER_OPEN,
        postroom_core::metrics::WAL_SLOT_LAG_BYTES,
        postroom_core::metrics::WAL_OLDEST_UNPUBLISHED_AGE,
    ] {
        assert!(all.contains(needed), "no alert on {needed}");
    }
}

#[test]
fn an_unknown_metric_is_caught() {
    let known = known();
    assert!(exists("postroom_handling_seconds_bucket", &known));
    assert!(!exists("postroom_made_up_total", &known));
    assert_eq!(
        names_in("rate(postroom_a_total[5m]) / postroom_b"),
        ["postroom_a_total", "postroom_b"]
    );
}
