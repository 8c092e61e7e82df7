//! How the command line ends when the world around it is not as expected: quietly, with
//! success, when the reader of its output goes away (`postroom parking list --json | head -1`;
//! a demo or bench whose printed summary nobody reads still runs to its end), and with what to
//! enable when a prerequisite is missing (the RabbitMQ management plugin).

mod common;

use common::{ok, postroom_cmd};
use postroom_core::{Envelope, ErrorClass, Headers, MessageId, ParkedMessage, ParkedStatus};
use postroom_sqlite::SqliteStore;
use std::path::Path;
use std::process::{Output, Stdio};

/// A parked message of the consumer `inventory`.
fn parked() -> ParkedMessage {
    let env = Envelope::builder("order.created", "tests")
        .aggregate("order", "o-1", 1)
        .build();
    let now = chrono::Utc::now();
    ParkedMessage {
        message_id: env.id,
        consumer: "inventory".into(),
        consumer_version: "1".into(),
        message_type: Some("order.created".into()),
        schema_version: Some(1),
        attempts: 4,
        first_failure_at: now,
        parked_at: now,
        error_class: ErrorClass::Permanent,
        error_code: "bad_sku".into(),
        error_message: "no such SKU".into(),
        correlation_id: None,
        traceparent: None,
        routing_key: "order.created".into(),
        producer: Some("tests".into()),
        headers: Headers::default(),
        body: serde_json::to_vec(&env).unwrap(),
        status: ParkedStatus::Parked,
        redrive_count: 0,
    }
}

/// A SQLite parking store `app.db` in a directory of its own, holding `n` parked messages;
/// the directory and the messages' ids.
async fn parking_lot(n: usize) -> (tempfile::TempDir, Vec<MessageId>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("app.db")).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..n {
        let m = parked();
        ids.push(m.message_id);
        postroom_core::ParkingStore::park(&store, &m).await.unwrap();
    }
    store.pool().close().await;
    (dir, ids)
}

/// `postroom args` in `dir` with its standard output a pipe whose reading end is already
/// closed: every write it makes fails as it would after `| head -1` had read its line.
fn run_into_closed_pipe(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = postroom_cmd(dir, args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The command prints something with its output open, and with it closed it ends with
/// success and says nothing.
fn quiet_on_closed_pipe(dir: &Path, args: &[&str]) {
    let open = postroom_cmd(dir, args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!ok(&open).is_empty(), "{args:?} writes output");
    let closed = run_into_closed_pipe(dir, args);
    assert!(
        closed.status.success(),
        "{args:?} on a closed pipe: {}: {}",
        closed.status,
        String::from_utf8_lossy(&closed.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&closed.stderr),
        "",
        "{args:?} on a closed pipe says nothing"
    );
}

#[tokio::test]
async fn parking_list_ends_quietly_when_its_reader_goes_away() {
    let (dir, _) = parking_lot(3).await;
    let dir = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        quiet_on_closed_pipe(&dir, &["parking", "list", "--database", "app.db", "--json"]);
        quiet_on_closed_pipe(&dir, &["parking", "list", "--database", "app.db"]);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn parking_show_ends_quietly_when_its_reader_goes_away() {
    let (dir, ids) = parking_lot(1).await;
    let dir = dir.path().to_path_buf();
    let id = ids[0].to_string();
    tokio::task::spawn_blocking(move || {
        quiet_on_closed_pipe(&dir, &["parking", "show", "--database", "app.db", &id]);
        quiet_on_closed_pipe(
            &dir,
            &["parking", "show", "--database", "app.db", "--json", &id],
        );
    })
    .await
    .unwrap();
}

/// A run whose printed summary nobody reads any more still runs to its end: its JSON report is
/// written, its exit status is its verdict, and nothing panics over the closed pipe.
fn runs_to_its_end_on_a_closed_pipe(dir: &Path, args: &[&str], report: &str) {
    let closed = run_into_closed_pipe(dir, args);
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert!(
        closed.status.success(),
        "{args:?} on a closed pipe: {}: {stderr}",
        closed.status
    );
    for word in ["panicked", "Broken pipe", "cannot write"] {
        assert!(
            !stderr.contains(word),
            "{args:?} on a closed pipe says {word:?}: {stderr}"
        );
    }
    let json = std::fs::read(dir.join(report)).expect("the JSON report is written");
    serde_json::from_slice::<serde_json::Value>(&json).expect("the JSON report is whole");
}

#[tokio::test]
async fn the_demo_runs_to_its_end_when_the_reader_of_its_report_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        runs_to_its_end_on_a_closed_pipe(
            &path,
            &["demo", "--orders", "16", "--report-json", "report.json"],
            "report.json",
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_bench_runs_to_its_end_when_the_reader_of_its_table_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        runs_to_its_end_on_a_closed_pipe(
            &path,
            &[
                "bench",
                "--scenario",
                "embedded",
                "--messages",
                "200",
                "--json",
                "bench.json",
            ],
            "bench.json",
        );
    })
    .await
    .unwrap();
}

/// A loopback port nothing listens on (one the system just handed out and took back).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_refused_management_api_asks_for_the_management_plugin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("topology.toml"),
        "prefix = \"prcli-exits\"\n[[consumers]]\nname = \"c\"\nbindings = [\"t.#\"]\n",
    )
    .unwrap();
    let api = format!("http://guest:guest@127.0.0.1:{}", closed_port());
    let dir_path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        postroom_cmd(
            &dir_path,
            &["topology", "plan", "--broker", &common::amqp()],
        )
        .env("POSTROOM_BROKER_API", api)
        .stdin(Stdio::null())
        .output()
        .unwrap()
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "unreachable: {err}");
    assert!(
        err.contains(
            "is the RabbitMQ management plugin enabled? \
             (rabbitmq-plugins enable rabbitmq_management)"
        ),
        "the hint in: {err}"
    );
}
