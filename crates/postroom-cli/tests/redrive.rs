//! `postroom parking redrive` asks each message's consumer inbox first: a message that consumer
//! already applied is skipped and reported, one older than the inbox's replay window is refused
//! unless `--force`, and everything else goes back with its id.

mod common;

use common::{ok, postroom_cmd};
use postroom_core::{
    Envelope, ErrorClass, Headers, MessageId, ParkedMessage, ParkedStatus, ParkingStore, Transport,
};
use postroom_sqlite::SqliteStore;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CONSUMER: &str = "inventory";

/// A message id made `age` ago (ids are UUIDv7: they say when the message was made).
fn id_made_ago(age: Duration) -> MessageId {
    let t = (SystemTime::now() - age)
        .duration_since(UNIX_EPOCH)
        .unwrap();
    MessageId::from(uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        t.as_secs(),
        t.subsec_nanos(),
    )))
}

fn parked(id: MessageId) -> ParkedMessage {
    let mut env = Envelope::builder("order.created", "tests")
        .aggregate("order", id.to_string(), 1)
        .build();
    env.id = id;
    let now = chrono::Utc::now();
    ParkedMessage {
        message_id: id,
        consumer: CONSUMER.into(),
        consumer_version: "1".into(),
        message_type: Some("order.created".into()),
        schema_version: Some(1),
        attempts: 4,
        first_failure_at: now,
        parked_at: now,
        error_class: ErrorClass::Transient,
        error_code: "db_unavailable".into(),
        error_message: "the database stayed down past the budget".into(),
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

/// Three parked messages of one consumer: one it already applied (its commit went through
/// though the outcome looked unknown), one fresh, one a month old.
struct Lot {
    dir: tempfile::TempDir,
    store: SqliteStore,
    applied: MessageId,
    fresh: MessageId,
    month_old: MessageId,
}

impl Lot {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("app.db")).await.unwrap();
        store.queue().bind(CONSUMER, &["order.*"]).await.unwrap();
        let applied = id_made_ago(Duration::from_secs(60));
        let fresh = id_made_ago(Duration::from_secs(60));
        let month_old = id_made_ago(Duration::from_secs(30 * 24 * 3600));
        for id in [applied, fresh, month_old] {
            store.park(&parked(id)).await.unwrap();
        }
        let mut conn = store.pool().acquire().await.unwrap();
        assert!(
            postroom_sqlite::inbox::claim(&mut conn, CONSUMER, applied)
                .await
                .unwrap()
        );
        drop(conn);
        Self {
            dir,
            store,
            applied,
            fresh,
            month_old,
        }
    }
}

/// `postroom args` run in `dir` with no input, off the async threads.
async fn postroom_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        postroom_cmd(&dir, &args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn redrive(dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "parking",
        "redrive",
        "--database",
        "app.db",
        "--yes",
        "--rate",
        "100",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = postroom_cmd(dir, &args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    serde_json::from_str(ok(&out).trim()).expect("one JSON report")
}

fn skipped(report: &serde_json::Value) -> Vec<(String, String)> {
    report["skipped"]
        .as_array()
        .expect("skipped is a list")
        .iter()
        .map(|s| {
            (
                s["message_id"].as_str().unwrap().to_string(),
                s["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_skips_what_the_inbox_applied_and_refuses_the_too_old_unless_forced() {
    let Lot {
        dir,
        store,
        applied,
        month_old,
        ..
    } = Lot::new().await;
    let queue = store.queue();

    let d = dir.path().to_path_buf();
    let first = tokio::task::spawn_blocking(move || redrive(&d, &[]))
        .await
        .unwrap();
    assert_eq!(first["total"], 3, "{first}");
    let mut reasons = skipped(&first);
    reasons.sort();
    let mut expected = vec![
        (applied.to_string(), "already_applied".to_string()),
        (
            month_old.to_string(),
            "older_than_replay_window".to_string(),
        ),
    ];
    expected.sort();
    assert_eq!(reasons, expected, "{first}");
    assert_eq!(
        queue.backlog(CONSUMER).await.unwrap().ready,
        1,
        "only the message nobody applied went back"
    );

    // Forced: the month-old message goes back; the applied one is still skipped.
    let d = dir.path().to_path_buf();
    let forced = tokio::task::spawn_blocking(move || redrive(&d, &["--force"]))
        .await
        .unwrap();
    assert_eq!(
        forced["total"], 2,
        "the skipped two are still parked: {forced}"
    );
    assert_eq!(
        skipped(&forced),
        vec![(applied.to_string(), "already_applied".to_string())],
        "{forced}"
    );
    assert_eq!(queue.backlog(CONSUMER).await.unwrap().ready, 2);

    // A replay window given on the command line is used: 60 days keeps the month-old message
    // inside it (it was redriven already, so nothing is selected but the applied one).
    let d = dir.path().to_path_buf();
    let wide = tokio::task::spawn_blocking(move || redrive(&d, &["--replay-window", "60d"]))
        .await
        .unwrap();
    assert_eq!(
        skipped(&wide),
        vec![(applied.to_string(), "already_applied".to_string())],
        "{wide}"
    );

    let bad = postroom_in(
        dir.path(),
        &[
            "parking",
            "redrive",
            "--database",
            "app.db",
            "--replay-window",
            "forever",
        ],
    )
    .await;
    // A bad window is a usage error.
    common::usage_error(&bad, "bad duration");
}

/// The dry run says what the run would do with each selected message: which would go back and
/// which would be skipped, and why, in the text listing and in the JSON summary; the run then
/// does just that. A dry run that counted every selected message as going back would promise
/// a redrive the guard then refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_says_which_messages_the_run_would_skip_and_why() {
    let Lot {
        dir,
        store,
        applied,
        fresh,
        month_old,
    } = Lot::new().await;

    let dry = postroom_in(
        dir.path(),
        &["parking", "redrive", "--database", "app.db", "--dry-run"],
    )
    .await;
    ok(&dry);
    let text = String::from_utf8_lossy(&dry.stderr);
    assert!(
        text.contains("3 message(s) selected: 1 would go back, 2 would be skipped"),
        "{text}"
    );
    let line_of = |id: MessageId| {
        text.lines()
            .find(|l| l.contains(&id.to_string()))
            .unwrap_or_else(|| panic!("{id} listed: {text}"))
            .to_string()
    };
    assert!(line_of(applied).contains("skip: already applied"), "{text}");
    assert!(
        line_of(month_old).contains("skip: older than the replay window"),
        "{text}"
    );
    assert!(!line_of(fresh).contains("skip"), "{text}");

    let json = postroom_in(
        dir.path(),
        &[
            "parking",
            "redrive",
            "--database",
            "app.db",
            "--dry-run",
            "--json",
        ],
    )
    .await;
    let summary: serde_json::Value = serde_json::from_str(ok(&json).trim()).expect("JSON");
    assert_eq!(summary["selected"], 3, "{summary}");
    assert_eq!(summary["would_send"], 1, "{summary}");
    assert_eq!(summary["would_skip"]["already_applied"], 1, "{summary}");
    assert_eq!(
        summary["would_skip"]["older_than_replay_window"], 1,
        "{summary}"
    );

    // The run does what the dry run said.
    let d = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || redrive(&d, &[]))
        .await
        .unwrap();
    assert_eq!(skipped(&run).len(), 2, "{run}");
    assert_eq!(store.queue().backlog(CONSUMER).await.unwrap().ready, 1);
}
