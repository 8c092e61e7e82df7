//! The pipeline page and its JSON show the outbox's scheduled rows that are not yet due (how
//! many, and when the first falls due), on SQLite and PostgreSQL: rows written with
//! `outbox::schedule`, among the unpublished rows the relay section counts.

mod common;

use chrono::{DateTime, Utc};
use common::{logged_in, serve_backend, users};
use postroom_console::{Auth, PgBackend, SqliteBackend};
use postroom_core::{Envelope, OutgoingMessage};
use postroom_postgres::{PgQueue, PgStore};
use postroom_testkit::servers::TestDb;
use std::sync::Arc;

fn message(n: u32) -> OutgoingMessage {
    let e = Envelope::builder("reminder.due", "tests")
        .aggregate("order", format!("o-{n}"), 1)
        .build();
    OutgoingMessage::from_envelope(&e, "reminder.due")
}

/// Two times an hour and two hours from now, to the millisecond.
fn later() -> [DateTime<Utc>; 2] {
    let now = Utc::now().timestamp_millis();
    [3_600_000, 7_200_000].map(|ms| DateTime::from_timestamp_millis(now + ms).unwrap())
}

/// The page and the JSON of the console at `base` show three rows waiting, two of them
/// scheduled, the first due at `first`.
async fn shows_the_scheduled_rows(base: &str, first: DateTime<Utc>) {
    let mut a = logged_in(base, "viewer").await;
    let (_, page, _) = a.get("/pipeline").await;
    let due = first.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string();
    for part in [
        r#"<span id="outbox-pending">3</span>"#.to_string(),
        r#"<span id="scheduled-waiting">2</span>"#.to_string(),
        format!(r#"<span id="scheduled-next-due">{due}</span>"#),
    ] {
        assert!(page.contains(&part), "{part} in {page}");
    }
    let (_, json, _) = a.get("/pipeline.json").await;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["scheduled_waiting"], 2, "{json}");
    let next: DateTime<Utc> = json["scheduled_next_due"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(next, first, "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_shows_scheduled_rows_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = postroom_sqlite::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    let [first, second] = later();
    let mut tx = store.begin().await.unwrap();
    postroom_sqlite::outbox::schedule(&mut tx, &message(1).not_before(second))
        .await
        .unwrap();
    postroom_sqlite::outbox::schedule(&mut tx, &message(2).not_before(first))
        .await
        .unwrap();
    postroom_sqlite::outbox::enqueue(&mut tx, &message(3))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let (base, _stop) =
        serve_backend(Arc::new(SqliteBackend::new(store)), Auth::Users(users())).await;
    shows_the_scheduled_rows(&base, first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_shows_scheduled_rows_on_postgres() {
    let db = TestDb::create().await;
    let store = PgStore::connect(&db.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let [first, second] = later();
    let p = store.prefix().clone();
    let mut tx = store.begin().await.unwrap();
    postroom_postgres::outbox::schedule(&mut tx, &p, &message(1).not_before(second))
        .await
        .unwrap();
    postroom_postgres::outbox::schedule(&mut tx, &p, &message(2).not_before(first))
        .await
        .unwrap();
    postroom_postgres::outbox::enqueue(&mut tx, &p, &message(3))
        .await
        .unwrap();
    postroom_postgres::commit(tx).await.unwrap();
    let queue = store.queue(PgQueue::defaults()).unwrap();
    let backend = PgBackend::new(store.clone(), Arc::new(queue));
    let (base, _stop) = serve_backend(Arc::new(backend), Auth::Users(users())).await;
    shows_the_scheduled_rows(&base, first).await;
}
