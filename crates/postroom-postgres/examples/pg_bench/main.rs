//! Throughput of postroom-postgres beside the same SQL run raw, in the same run.
//!
//! ```text
//! cargo run --release -p postroom-postgres --example pg_bench -- --messages 4000 --json /tmp/pg_bench.json
//! ```
//!
//! * relay: the relay loop users run (pipelined) into a publisher that confirms at once, beside
//!   a raw loop of the same claim-with-lease UPDATE and mark UPDATE (no per-aggregate check, no
//!   relay loop); `--rounds` pairs alternating which side goes first, the median of each;
//! * consumer: the consumer loop on `PgQueue` with a handler claiming the inbox and writing an
//!   effect in one transaction, beside the same transaction shape run raw;
//! * produce: one outbox row per transaction, beside `enqueue_batch` with 100 per transaction.
//!
//! Each at 1 and 8 connections, on a fresh database `pr_bench_<random>` dropped at the end.
//! The server comes from `--url` or `POSTROOM_BENCH_PG` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`).

mod scenarios;

use serde::Serialize;
use sqlx::{ConnectOptions, postgres::PgConnectOptions};
use std::str::FromStr;

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct Measure {
    scenario: &'static str,
    variant: &'static str,
    connections: u32,
    messages: usize,
    seconds: f64,
    per_sec: f64,
}

#[derive(Serialize)]
struct Ratio {
    scenario: &'static str,
    connections: u32,
    ratio: f64,
    target: f64,
    meets_target: bool,
}

struct Args {
    url: String,
    messages: usize,
    rounds: usize,
    json: Option<String>,
    scenarios: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        url: std::env::var("POSTROOM_BENCH_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        messages: 4000,
        rounds: 5,
        json: None,
        scenarios: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--url" => a.url = it.next().expect("--url URL"),
            "--messages" => {
                a.messages = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--messages N")
            }
            "--rounds" => {
                a.rounds = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .expect("--rounds N (at least 1)")
            }
            "--json" => a.json = Some(it.next().expect("--json PATH")),
            "--scenario" => {
                let s = it.next().expect("--scenario relay|consumer|produce");
                assert!(
                    ["relay", "consumer", "produce"].contains(&s.as_str()),
                    "--scenario relay|consumer|produce, not {s}"
                );
                a.scenarios.push(s);
            }
            "--help" | "-h" => {
                println!(
                    "pg_bench [--url URL] [--messages N (default 4000)] [--rounds R (relay pairs, default 5)] [--scenario relay|consumer|produce (repeatable; default all)] [--json PATH]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown flag {other} (try --help)"),
        }
    }
    a
}

fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.rsplit_once('/') {
        Some((head, _)) if head.find("//").is_some_and(|i| head.len() > i + 2) => head,
        _ => base,
    };
    query.map_or_else(|| format!("{base}/{db}"), |q| format!("{base}/{db}?{q}"))
}

#[tokio::main]
async fn main() {
    let a = args();
    let name = format!(
        "pr_bench_{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    );
    let mut admin = PgConnectOptions::from_str(&a.url)
        .expect("url")
        .connect()
        .await
        .expect("PostgreSQL reachable");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .expect("create database");
    let url = with_database(&a.url, &name);
    let settings = scenarios::server_settings(&url).await;
    let mut results = Vec::new();
    let run = |s: &str| a.scenarios.is_empty() || a.scenarios.iter().any(|x| x == s);
    for conns in [1u32, 8] {
        if run("relay") {
            results.extend(scenarios::relay(&url, conns, a.messages, a.rounds).await);
        }
        if run("consumer") {
            results.extend(scenarios::consumer(&url, conns, a.messages).await);
        }
        if run("produce") {
            results.extend(scenarios::produce(&url, conns, a.messages).await);
        }
    }
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .expect("drop database");

    println!(
        "\n{:<10} {:<22} {:>5} {:>9} {:>10}",
        "scenario", "variant", "conns", "messages", "msg/s"
    );
    for m in &results {
        println!(
            "{:<10} {:<22} {:>5} {:>9} {:>10.0}",
            m.scenario, m.variant, m.connections, m.messages, m.per_sec
        );
    }
    // The median over the rounds of each variant (the relay runs several, alternating).
    let rate = |s: &str, v: &str, c: u32| {
        let mut xs: Vec<f64> = results
            .iter()
            .filter(|m| m.scenario == s && m.variant == v && m.connections == c)
            .map(|m| m.per_sec)
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.get(xs.len() / 2).copied().unwrap_or(0.0)
    };
    let mut ratios = Vec::new();
    println!(
        "\n{:<10} {:>5} {:>8} {:>8}",
        "ratio", "conns", "value", "target"
    );
    for c in [1u32, 8] {
        for (scenario, ours, base, target) in [
            ("relay", "postroom", "raw", 0.9),
            ("consumer", "postroom", "raw", 0.8),
            ("produce", "batched_100_per_tx", "one_per_tx", 3.0),
        ] {
            if !run(scenario) {
                continue;
            }
            let ratio = rate(scenario, ours, c) / rate(scenario, base, c).max(f64::MIN_POSITIVE);
            println!(
                "{scenario:<10} {c:>5} {ratio:>8.2} {target:>8.2}{}",
                if ratio >= target {
                    ""
                } else {
                    "  BELOW TARGET"
                }
            );
            ratios.push(Ratio {
                scenario,
                connections: c,
                ratio,
                target,
                meets_target: ratio >= target,
            });
        }
    }
    println!("\nserver: {settings}");
    println!(
        "note: PostgreSQL's fsync is unrealistically cheap on this VM (virtual disk, shared host), so absolute \
         figures are optimistic; the ratios against raw SQL measured in the same run are the point."
    );
    if let Some(path) = a.json {
        let doc = serde_json::json!({ "server": settings, "results": results, "ratios": ratios,
            "note": "PostgreSQL fsync is unrealistically cheap on this VM; compare ratios, not absolute figures" });
        std::fs::write(&path, serde_json::to_vec_pretty(&doc).expect("json")).expect("write json");
        println!("wrote {path}");
    }
}
