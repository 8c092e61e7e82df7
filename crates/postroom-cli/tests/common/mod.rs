//! Helpers shared by the CLI's tests: the binary (run in place or off the async runtime), the
//! test servers, unique broker names, and the steps the tests of every broker take (the
//! demo, topology plan/apply). The parking round trip is in `parking`, a broker's workload
//! in its own module.
#![allow(dead_code)]

pub mod daemon;
pub mod nats;
pub mod parking;
pub mod rabbit;
pub mod sqs;

use std::path::Path;
use std::process::{Command, Output};

#[allow(unused_imports)]
pub use postroom_testkit::servers::TestDb;

/// The RabbitMQ the tests use (`POSTROOM_TEST_AMQP`).
pub fn amqp() -> String {
    std::env::var("POSTROOM_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// `postroom` with `args`, run in `dir`.
pub fn postroom_cmd(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_postroom"));
    c.current_dir(dir).args(args);
    c
}

/// Run `postroom` with `args` in `dir` and wait for it.
pub fn postroom(dir: &Path, args: &[&str]) -> Output {
    postroom_cmd(dir, args).output().expect("run postroom")
}

/// Its stdout, after asserting success (stdout and stderr shown otherwise).
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed ({})\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Assert that a run was refused as a usage error: exit 2, with `says` in its stderr.
pub fn usage_error(out: &Output, says: &str) {
    assert_eq!(out.status.code(), Some(2), "{says}: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(says),
        "{says} not in: {out:?}"
    );
}

/// The JSON file a command wrote.
pub fn json_file(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("report written")).expect("valid JSON")
}

/// Every line of JSON output.
pub fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Run `postroom` with `args` in `dir` off the async runtime and wait for it.
pub async fn postroom_async(dir: &Path, args: &[&str]) -> Output {
    postroom_async_env(dir, args, Vec::new()).await
}

/// [`postroom_async`] with `env` added to the command's environment.
pub async fn postroom_async_env(
    dir: &Path,
    args: &[&str],
    env: Vec<(&'static str, String)>,
) -> Output {
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
    tokio::task::spawn_blocking(move || {
        postroom_cmd(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>())
            .envs(env)
            .output()
            .expect("run postroom")
    })
    .await
    .expect("postroom ran")
}

/// Run `postroom` with `args` in `dir` off the async runtime, assert success, and read the
/// JSON report it wrote to `report` (a path relative to `dir`).
pub async fn run_for_report(dir: &Path, args: &[&str], report: &str) -> serde_json::Value {
    run_for_report_env(dir, args, report, Vec::new()).await
}

/// [`run_for_report`] with `env` added to the command's environment.
pub async fn run_for_report_env(
    dir: &Path,
    args: &[&str],
    report: &str,
    env: Vec<(&'static str, String)>,
) -> serde_json::Value {
    ok(&postroom_async_env(dir, args, env).await);
    json_file(&dir.join(report))
}

/// `postroom demo` on `broker` for the workload `prefix`, with `extra` flags and `env` added;
/// its JSON report.
pub async fn broker_demo(
    broker: &str,
    prefix: &str,
    extra: &[&str],
    env: Vec<(&'static str, String)>,
) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "demo",
        "--broker",
        broker,
        "--workload",
        prefix,
        "--report-json",
        "r.json",
    ];
    args.extend_from_slice(extra);
    let out = postroom_async_env(dir.path(), &args, env).await;
    ok(&out);
    no_colour_codes(&out);
    no_link_torn_down_at_exit(&out);
    json_file(&dir.path().join("r.json"))
}

/// A run closed its broker links before it exited: none was torn down under a connection
/// still closing (lapin says so in an error line naming the runtime's shutdown).
pub fn no_link_torn_down_at_exit(out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("being shutdown"),
        "a broker link was torn down at exit: {err}"
    );
}

/// A run's stderr, a pipe here, carries no terminal colour codes.
pub fn no_colour_codes(out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\u{1b}'), "colour codes on a pipe: {err}");
}

/// What the demo on every broker shows: nothing lost, nothing applied twice, the three
/// poison messages parked (`parked`: how they reached the store), the killed order's
/// reservation applied once, no failed check.
pub fn check_broker_demo(r: &serde_json::Value, parked: &str) {
    assert_eq!(r["lost"], 0, "{r}");
    assert_eq!(r["duplicate_effects"], 0, "{r}");
    assert_eq!(r["parked"], 3, "{parked}: {r}");
    assert_eq!(r["killed_order_reservations"], 1, "{r}");
    assert_eq!(r["failures"].as_array().unwrap().len(), 0, "{r}");
}

/// A topology planned, applied and planned again by the commands.
pub struct Planned {
    /// Where the commands ran (its `topology.toml`).
    pub dir: tempfile::TempDir,
    /// The workload's prefix.
    pub prefix: String,
    /// `topology plan`.
    pub plan: String,
    /// `topology apply --yes`.
    pub apply: String,
    /// `topology plan` after it.
    pub again: String,
}

/// A workload of its own (`prcli-t-…`) whose topology file is `prefix = "…"` followed by
/// `rest` (where `{prefix}` stands for the prefix): `topology plan`, `topology apply --yes`
/// and `topology plan` again run on `broker` (with `env` added), each asserted successful.
pub async fn plan_apply_plan(
    rest: &str,
    broker: &str,
    env: Vec<(&'static str, String)>,
) -> Planned {
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("t");
    std::fs::write(
        dir.path().join("topology.toml"),
        format!(
            "prefix = \"{prefix}\"\n{}",
            rest.replace("{prefix}", &prefix)
        ),
    )
    .unwrap();
    let run = async |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--broker", broker]);
        ok(&postroom_async_env(dir.path(), &all, env.clone()).await)
    };
    let plan = run(&["topology", "plan"]).await;
    let apply = run(&["topology", "apply", "--yes"]).await;
    let again = run(&["topology", "plan"]).await;
    Planned {
        dir,
        prefix,
        plan,
        apply,
        again,
    }
}

impl Planned {
    /// Assert that the plan has each of `needles` (where `{prefix}` stands for the prefix),
    /// the apply said `applied`, and the plan after it had nothing to do.
    pub fn check(&self, needles: &[&str], applied: &str) {
        let Self {
            prefix,
            plan,
            apply,
            again,
            ..
        } = self;
        for needle in needles {
            let needle = needle.replace("{prefix}", prefix);
            assert!(plan.contains(&needle), "{needle} in plan:\n{plan}");
        }
        assert!(apply.contains(applied), "{apply}");
        assert!(again.contains("nothing to do"), "{again}");
    }
}

/// A workload prefix of its own for one test's queues and exchanges.
pub fn workload(tag: &str) -> String {
    format!("prcli-{tag}-{}", postroom_testkit::servers::suffix())
}

/// Delete every queue, exchange and policy whose name starts with `prefix`.
pub async fn cleanup(prefix: &str) {
    let api = management_api();
    let _ = api.delete_everything_named(prefix).await;
}

/// The management API of the test broker.
pub fn management_api() -> postroom_rabbitmq::ManagementApi {
    let broker = postroom_ops::Endpoint::broker(&amqp()).unwrap();
    let url = postroom_rabbitmq::driver::management_url(&broker).unwrap();
    postroom_rabbitmq::ManagementApi::new(url.expose(), "/").unwrap()
}

/// The Kafka broker the tests use (`POSTROOM_TEST_KAFKA`, `host:port`), as a `kafka://` URL.
pub fn kafka() -> String {
    let hostport = std::env::var("POSTROOM_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".into());
    format!("kafka://{hostport}")
}

/// Delete every Kafka topic whose name starts with `prefix`.
pub async fn kafka_cleanup(prefix: &str) {
    use postroom_kafka::topology::{Consumers, Topology, admin, delete_topics};
    let brokers = kafka().trim_start_matches("kafka://").to_string();
    let config = postroom_kafka::KafkaConfig::new(brokers);
    let Ok(topology) = Topology::new(&config, Consumers::default()) else {
        return;
    };
    let names: Vec<String> = topology
        .existing()
        .await
        .map(|t| t.into_keys().filter(|n| n.starts_with(prefix)).collect())
        .unwrap_or_default();
    if let Ok(admin) = admin(&config) {
        let _ = delete_topics(&admin, &names).await;
    }
}

/// The short soak on PostgreSQL and `broker`: 5,000 messages, a consumer or relay SIGKILLed
/// every `kill_every` seconds; `extra` flags added. Returns the JSON summary.
pub async fn broker_soak(
    db: &str,
    broker: &str,
    prefix: &str,
    kill_every: &str,
    extra: &[&str],
) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "soak",
        "--messages",
        "5000",
        "--kill-every",
        kill_every,
        "--database",
        db,
        "--broker",
        broker,
        "--workload",
        prefix,
        "--json",
        "s.json",
    ];
    args.extend_from_slice(extra);
    run_for_report(dir.path(), &args, "s.json").await
}

/// What every short soak must show, on a broker or on the embedded queue: nothing lost,
/// nothing applied twice, order kept, only poison parked, and consumers or relays really
/// killed.
pub fn check_broker_soak(r: &serde_json::Value) {
    check_soak(r, 5000);
    assert!(
        r["relay_kills"].as_u64().unwrap() >= 1,
        "a relay was killed: {r}"
    );
    assert!(
        r["consumer_kills"].as_u64().unwrap() >= 1,
        "a consumer was killed: {r}"
    );
}

/// Check a soak's report: `messages` sent, none lost, no effect applied twice, every
/// aggregate's order kept, nothing parked that was not meant to be, and at least one process
/// killed on the way.
pub fn check_soak(r: &serde_json::Value, messages: u64) {
    assert_eq!(r["messages"], messages, "{r:#}");
    assert_eq!(r["lost"], 0, "{r:#}");
    assert_eq!(r["duplicate_effects"], 0, "{r:#}");
    assert_eq!(r["order_violations"], 0, "{r:#}");
    assert_eq!(r["parked_unexpected"], 0, "{r:#}");
    assert!(r["kills"].as_u64().unwrap() >= 1, "{r:#}");
}
