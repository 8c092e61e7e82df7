//! The consumers' last errors kept in the store's tables (SQLite and PostgreSQL): a message
//! SQS moves to the DLQ by itself is ingested by a transport that never saw it fail (another
//! process, or the same one restarted) and still gets the last error and first failure time
//! the consumer recorded; the record goes once the copy is stored. Also what each log keeps:
//! the first failure time of a message across records, per consumer, and a purge of old rows.

mod common;

use common::{
    TestSqs, assert_moved_with_the_recorded_error, order, order_subscriber, receive_within,
};
use postroom_core::parking::ingest::ingest_dead_letters;
use postroom_core::parking::{LastError, LastErrorLog};
use postroom_core::{
    Delivery, ErrorClass, MessageId, ParkingFilter, ParkingStore, Subscriber, Transport,
};
use postroom_postgres::PgStore;
use postroom_sqlite::SqliteStore;
use postroom_sqs::{SqsTransport, TopologyConfig};
use postroom_testkit::cases::publish_to;
use postroom_testkit::probe::{first_transient_retry, policy};
use postroom_testkit::servers::TestDb;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn error(code: &str, at: chrono::DateTime<chrono::Utc>) -> LastError {
    LastError {
        first_failure_at: at,
        at,
        class: ErrorClass::Transient,
        code: code.into(),
        message: format!("{code}: connection refused"),
    }
}

/// What every durable log must do.
async fn keeps_the_first_failure_per_consumer(log: &dyn LastErrorLog) {
    let id = MessageId::new();
    let t0 = chrono::Utc::now() - chrono::Duration::seconds(120);
    assert!(log.get("inv", id).await.unwrap().is_none());
    log.record("inv", id, error("first", t0)).await.unwrap();
    log.record("inv", id, error("second", chrono::Utc::now()))
        .await
        .unwrap();
    let got = log.get("inv", id).await.unwrap().expect("recorded");
    assert_eq!(got.code, "second");
    assert_eq!(got.message, "second: connection refused");
    assert_eq!(got.class, ErrorClass::Transient);
    assert_eq!(
        got.first_failure_at.timestamp_millis(),
        t0.timestamp_millis(),
        "the first failure is kept"
    );
    assert!(
        log.get("orders", id).await.unwrap().is_none(),
        "per consumer"
    );
    log.forget("inv", id).await.unwrap();
    assert!(log.get("inv", id).await.unwrap().is_none());
}

#[tokio::test]
async fn sqlite_log_keeps_the_first_failure_and_purges_old_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("l.db"))
        .await
        .unwrap()
        .last_errors();
    keeps_the_first_failure_per_consumer(&store).await;
    let (old, fresh) = (MessageId::new(), MessageId::new());
    let long_ago = chrono::Utc::now() - chrono::Duration::days(30);
    store
        .record("inv", old, error("old", long_ago))
        .await
        .unwrap();
    store
        .record("inv", fresh, error("new", chrono::Utc::now()))
        .await
        .unwrap();
    let purged = store
        .purge(Duration::from_secs(15 * 24 * 3600))
        .await
        .unwrap();
    assert_eq!(purged, 1);
    assert!(store.get("inv", old).await.unwrap().is_none());
    assert!(store.get("inv", fresh).await.unwrap().is_some());
}

#[tokio::test]
async fn postgres_log_keeps_the_first_failure_and_purges_old_rows() {
    let db = TestDb::create().await;
    let store = PgStore::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    let log = store.last_errors();
    keeps_the_first_failure_per_consumer(&log).await;
    let (old, fresh) = (MessageId::new(), MessageId::new());
    let long_ago = chrono::Utc::now() - chrono::Duration::days(30);
    log.record("inv", old, error("old", long_ago))
        .await
        .unwrap();
    log.record("inv", fresh, error("new", chrono::Utc::now()))
        .await
        .unwrap();
    assert_eq!(
        log.purge(Duration::from_secs(15 * 24 * 3600))
            .await
            .unwrap(),
        1
    );
    assert!(log.get("inv", old).await.unwrap().is_none());
    assert!(log.get("inv", fresh).await.unwrap().is_some());
}

/// A consumer (on a transport of its own, logging into `consumer_log`) fails the message
/// once, then dies holding it until SQS moves it to the DLQ; a second transport, logging into
/// `ingest_log` (the same tables through another connection, as another process would), ingests
/// the copy into `parking`, where it is the one parked message and carries the last error and
/// first failure time the consumer recorded.
async fn moved_by_sqs_and_parked_elsewhere_with_its_last_error(
    t: &TestSqs,
    consumer_log: Arc<dyn LastErrorLog>,
    ingest_log: Arc<dyn LastErrorLog>,
    parking: Arc<dyn ParkingStore>,
) {
    let cfg = TopologyConfig {
        max_receive_count: 2,
        ..t.config_with_short_visibility()
    }
    .with_consumer("inventory", &["order.created"]);
    t.apply(&cfg).await;
    let consumer_side = SqsTransport::connect(t.client.clone(), cfg.clone())
        .await
        .unwrap()
        .with_last_errors(consumer_log);
    let env = order("o-1", 1);
    publish_to(consumer_side.publisher(), &env, "order.created").await;
    let mut sub = order_subscriber(&consumer_side, "inventory").await;
    let first = receive_within(&mut sub, Duration::from_secs(10))
        .await
        .expect("first receive");
    let failed_at = chrono::Utc::now();
    let plan = first_transient_retry(&policy("1s", 5), failed_at);
    first.retry(&plan).await.map_err(|(e, _)| e).unwrap();
    // The second receive: the consumer dies holding it (dropped unsettled).
    let second = receive_within(&mut sub, Duration::from_secs(10))
        .await
        .expect("received again");
    drop(second);
    drop(sub);
    drop(consumer_side);
    // The next receive would be the third: SQS moves it to the DLQ. Another transport, which
    // never saw the failure, ingests it.
    let ingest_side = SqsTransport::connect(t.client.clone(), cfg)
        .await
        .unwrap()
        .with_last_errors(ingest_log.clone());
    let mut moved = 0;
    let end = Instant::now() + Duration::from_secs(20);
    while moved == 0 && Instant::now() < end {
        // Poll the work queue too: SQS moves a message when a receive finds its count spent.
        let mut work = order_subscriber(&ingest_side, "inventory").await;
        assert!(
            work.next(Duration::from_millis(1500))
                .await
                .unwrap()
                .is_none(),
            "the message never reaches a handler a third time"
        );
        moved = ingest_dead_letters(
            &ingest_side,
            "inventory",
            parking.clone(),
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    }
    assert_eq!(moved, 1, "the copy SQS moved was ingested");
    assert!(
        ingest_log.get("inventory", env.id).await.unwrap().is_none(),
        "the record goes once the copy is stored"
    );
    let parked = parking.search(&ParkingFilter::default(), 10).await.unwrap();
    assert_eq!(parked.len(), 1);
    let p = &parked[0];
    assert_eq!(p.message_id, env.id);
    assert_moved_with_the_recorded_error(p, failed_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_sqs_moved_gets_its_last_error_from_sqlite_in_another_transport() {
    let t = TestSqs::new().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shop.db");
    let consumer_store = SqliteStore::open(&path).await.unwrap();
    // Another pool on the same file: what another process has.
    let ingest_store = SqliteStore::open(&path).await.unwrap();
    moved_by_sqs_and_parked_elsewhere_with_its_last_error(
        &t,
        Arc::new(consumer_store.last_errors()),
        Arc::new(ingest_store.last_errors()),
        Arc::new(ingest_store.clone()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_sqs_moved_gets_its_last_error_from_postgres_in_another_transport() {
    let t = TestSqs::new().await;
    let db = TestDb::create().await;
    let consumer_store = PgStore::connect(&db.url).await.unwrap();
    consumer_store.migrate().await.unwrap();
    let ingest_store = PgStore::connect(&db.url).await.unwrap();
    moved_by_sqs_and_parked_elsewhere_with_its_last_error(
        &t,
        Arc::new(consumer_store.last_errors()),
        Arc::new(ingest_store.last_errors()),
        Arc::new(ingest_store.parking()),
    )
    .await;
}
