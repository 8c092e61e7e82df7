//! `postroom parking redrive --resume`: a redrive killed halfway (SIGKILL) is continued by
//! its run id; the resumed run sends only what was still pending, so every selected message
//! goes back exactly once.

mod common;

use common::{ok, postroom, postroom_cmd};
use postroom_core::{
    ErrorClass, MessageId, ParkedMessage, ParkedStatus, ParkingFilter, ParkingStore,
};
use postroom_sqlite::SqliteStore;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

const MESSAGES: usize = 10;

fn parked(i: usize) -> ParkedMessage {
    let now = chrono::Utc::now();
    ParkedMessage {
        message_id: MessageId::new(),
        consumer: "inventory".into(),
        consumer_version: "1".into(),
        message_type: Some("order.created".into()),
        schema_version: Some(1),
        attempts: 1,
        first_failure_at: now,
        parked_at: now,
        error_class: ErrorClass::Permanent,
        error_code: "rejected".into(),
        error_message: "rejected by the test".into(),
        correlation_id: None,
        traceparent: None,
        routing_key: "orders".into(),
        producer: None,
        headers: Default::default(),
        body: format!(r#"{{"n":{i}}}"#).into_bytes(),
        status: ParkedStatus::Parked,
        redrive_count: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_killed_halfway_is_resumed_and_sends_each_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = SqliteStore::open(d.join("r.db")).await.unwrap();
    // The consumer is bound in the database's own queue, where the redrive sends them.
    store.queue().bind("inventory", &["orders"]).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..MESSAGES {
        let p = parked(i);
        ids.push(p.message_id);
        store.park(&p).await.unwrap();
    }

    // One message every two seconds: the run is killed as soon as its first message is
    // recorded, seconds before its next publish. (A kill between a publish and its record
    // would send that id again on resume: redrive is at least once, the inbox absorbs it.)
    let mut first = postroom_cmd(
        d,
        &[
            "parking",
            "redrive",
            "--database",
            "r.db",
            "--consumer",
            "inventory",
            "--rate",
            "0.5",
            "--yes",
            "--json",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("run postroom");
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        let runs = store.redrive_runs(10).await.unwrap();
        if let Some(r) = runs.into_iter().find(|r| r.done >= 1) {
            break r;
        }
        assert!(
            first.try_wait().unwrap().is_none(),
            "the redrive ended before it was interrupted"
        );
        assert!(Instant::now() < deadline, "no message redriven within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    first.kill().expect("SIGKILL the redrive");
    first.wait().unwrap();
    let interrupted = store.redrive_run(&run.id).await.unwrap().unwrap();
    assert_eq!(interrupted.total, MESSAGES as u64);
    assert!(
        interrupted.done >= 1 && interrupted.done < interrupted.total,
        "interrupted halfway: {}/{}",
        interrupted.done,
        interrupted.total
    );

    let (d2, id) = (d.to_path_buf(), run.id.clone());
    let out = tokio::task::spawn_blocking(move || {
        ok(&postroom(
            &d2,
            &[
                "parking",
                "redrive",
                "--database",
                "r.db",
                "--resume",
                &id,
                "--rate",
                "1000",
                "--yes",
                "--json",
            ],
        ))
    })
    .await
    .unwrap();
    let summary: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON summary");
    assert_eq!(summary["run_id"], run.id.as_str());
    assert_eq!(summary["done"], MESSAGES as u64);
    assert_eq!(summary["total"], MESSAGES as u64);

    // Every selected message is in the consumer's queue exactly once.
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT message_id, count(*) FROM postroom_queue WHERE consumer = 'inventory' GROUP BY message_id",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    let copies: BTreeMap<String, i64> = rows.into_iter().collect();
    assert_eq!(
        copies.len(),
        MESSAGES,
        "every message sent back: {copies:?}"
    );
    for id in &ids {
        assert_eq!(
            copies.get(&id.to_string()),
            Some(&1),
            "{id} sent exactly once across the killed and the resumed run"
        );
    }
    let redriven = store
        .search(
            &ParkingFilter {
                consumer: Some("inventory".into()),
                include_redriven: true,
                ..ParkingFilter::default()
            },
            100,
        )
        .await
        .unwrap();
    assert!(
        redriven
            .iter()
            .all(|p| p.status == ParkedStatus::Redriven && p.redrive_count == 1),
        "each parked record redriven once"
    );
}
