//! The store's own behaviour beyond the conformance suite: migrations, the outbox claim rules
//! and wake-up, topic routing, queue config and backlog, and parking filters equal to
//! `ParkingFilter::matches`.

mod common;

use common::outgoing;
use postroom_core::pattern;
use postroom_core::{
    BacklogProbe, Delivery, Envelope, ErrorClass, ErrorKind, MessageId, OutboxStore,
    OutgoingMessage, ParkedMessage, ParkedStatus, ParkingFilter, ParkingStore, Publisher, Route,
    Subscriber,
};
use postroom_postgres::{PgQueue, PgStore, TablePrefix, commit, outbox};
use postroom_testkit::cases;
use postroom_testkit::servers::TestDb;
use std::time::{Duration, Instant};

async fn store(db: &TestDb, prefix: &str) -> PgStore {
    let s = PgStore::from_pool(db.pool(6).await, TablePrefix::new(prefix).unwrap());
    s.migrate().await.unwrap();
    s
}

/// A fresh database with a migrated store under `postroom_` (keep the database alive as long
/// as the store).
async fn fresh_store() -> (TestDb, PgStore) {
    let db = TestDb::create().await;
    let s = store(&db, "postroom_").await;
    (db, s)
}

#[tokio::test]
async fn migrations_are_idempotent_concurrent_and_prefixed() {
    let db = TestDb::create().await;
    let pool = db.pool(6).await;
    let (a, b) = (
        PgStore::from_pool(pool.clone(), TablePrefix::new("one_").unwrap()),
        PgStore::from_pool(pool.clone(), TablePrefix::new("one_").unwrap()),
    );
    let (x, y) = tokio::join!(a.migrate(), b.migrate());
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(
        x.len() + y.len(),
        postroom_postgres::migrate::MIGRATIONS.len(),
        "applied once between them"
    );
    assert!(
        a.migrate().await.unwrap().is_empty(),
        "nothing left to apply"
    );
    let other = PgStore::from_pool(pool.clone(), TablePrefix::new("two_").unwrap());
    assert_eq!(
        other.migrate().await.unwrap().len(),
        postroom_postgres::migrate::MIGRATIONS.len(),
        "a second prefix is independent"
    );
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'one\\_%' AND schemaname = 'public'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(n >= 9, "{n} tables");
}

/// One message per `(aggregate, version)`, enqueued in one transaction in that order.
async fn enqueued(s: &PgStore, versions: &[(&str, u64)]) -> Vec<OutgoingMessage> {
    let rows: Vec<_> = versions.iter().map(|(a, v)| outgoing(a, *v)).collect();
    enqueue_in_one_transaction(s, &rows).await;
    rows
}

/// Enqueue `rows` in one transaction, in order (batches of 2000 rows).
async fn enqueue_in_one_transaction(s: &PgStore, rows: &[OutgoingMessage]) {
    let mut tx = s.begin().await.unwrap();
    for chunk in rows.chunks(2000) {
        outbox::enqueue_batch(&mut tx, s.prefix(), chunk)
            .await
            .unwrap();
    }
    commit(tx).await.unwrap();
}

#[tokio::test]
async fn claim_takes_only_the_head_of_each_aggregate() {
    let (_db, s) = fresh_store().await;
    let mut tx = s.begin().await.unwrap();
    let rows: Vec<_> = [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("b", 2)]
        .iter()
        .map(|(a, v)| outgoing(a, *v))
        .collect();
    outbox::enqueue_batch(&mut tx, s.prefix(), &rows)
        .await
        .unwrap();
    commit(tx).await.unwrap();
    let ob = s.outbox();
    let first = ob.claim("r1", 10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        first.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![rows[0].id, rows[2].id],
        "one head per aggregate"
    );
    assert!(
        ob.claim("r2", 10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "heads leased: nothing else is publishable"
    );
    ob.mark_published("r1", &[rows[0].id]).await.unwrap();
    ob.release("r1", rows[2].id, "broker down", Duration::from_secs(60))
        .await
        .unwrap();
    // r2's last claim found nothing, so its next one scans only once the mark's notification
    // has arrived or a short recheck time has passed: wait for either, as a relay does.
    ob.wait_for_rows("r2", Duration::from_secs(2)).await;
    let next = ob.claim("r2", 10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        next.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![rows[1].id],
        "b waits behind its released head"
    );
    assert_eq!(ob.pending().await.unwrap(), 4);
    assert_eq!(ob.purge_published(Duration::ZERO).await.unwrap(), 1);
}

fn ids(rows: &[postroom_core::OutboxRecord]) -> Vec<postroom_core::MessageId> {
    let mut v: Vec<_> = rows.iter().map(|r| r.id).collect();
    v.sort();
    v
}

#[tokio::test]
async fn a_relay_keeps_the_aggregates_it_publishes() {
    keeps_the_aggregates_it_publishes(false).await;
}

#[tokio::test]
async fn a_relay_that_deletes_what_it_published_keeps_its_aggregates_too() {
    keeps_the_aggregates_it_publishes(true).await;
}

async fn keeps_the_aggregates_it_publishes(delete: bool) {
    // Marking and claiming is one step: the marked aggregates' next rows become heads with
    // the mark, and the marking relay takes them before any other relay can see them. An
    // outbox that deletes confirmed rows instead of marking them behaves the same.
    let (_db, s) = fresh_store().await;
    let rows = enqueued(
        &s,
        &[
            ("a", 1),
            ("b", 1),
            ("c", 1),
            ("a", 2),
            ("b", 2),
            ("c", 2),
            ("d", 1),
            ("a", 3),
        ],
    )
    .await;
    let id = |i: usize| rows[i].id;
    let ob = if delete {
        s.outbox().delete_on_publish()
    } else {
        s.outbox()
    };
    let lease = Duration::from_secs(30);
    let r1 = ob.claim("r1", 2, lease).await.unwrap();
    assert_eq!(ids(&r1), ids_of(&[id(0), id(1)]), "the two oldest heads");
    let r2 = ob.claim("r2", 10, lease).await.unwrap();
    assert_eq!(ids(&r2), ids_of(&[id(2), id(6)]), "c1 and d1");
    // r1 marks a1 and b1 and gets a2 and b2, although c2 (after r2's mark) is as old.
    let r1 = ob
        .mark_and_claim("r1", &[id(0), id(1)], 2, lease)
        .await
        .unwrap();
    assert_eq!(ids(&r1), ids_of(&[id(3), id(4)]));
    // r2 marks c1 and d1: c2 is its own, d has no next row, and a3 waits behind a2 (r1's).
    let r2 = ob
        .mark_and_claim("r2", &[id(2), id(6)], 10, lease)
        .await
        .unwrap();
    assert_eq!(ids(&r2), ids_of(&[id(5)]));
    // Marking again is harmless (a retried step), and order still holds: a3 after a2.
    let r1 = ob
        .mark_and_claim("r1", &[id(3), id(4), id(0)], 10, lease)
        .await
        .unwrap();
    assert_eq!(ids(&r1), ids_of(&[id(7)]));
    assert_eq!(
        ob.pending().await.unwrap(),
        2,
        "c2 and a3 are out, not marked"
    );
    let rows_left = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM postroom_outbox")
            .fetch_one(s.pool())
            .await
            .unwrap()
    };
    assert_eq!(rows_left().await, if delete { 2 } else { 8 });
    ob.mark_published("r2", &[id(5)]).await.unwrap();
    ob.mark_published("r1", &[id(7)]).await.unwrap();
    assert_eq!(ob.pending().await.unwrap(), 0);
    assert_eq!(
        rows_left().await,
        if delete { 0 } else { 8 },
        "deleted once confirmed, or kept marked for the retention"
    );
}

/// What `relay` claims now (up to 10 rows, a 30 s lease), as sorted ids.
async fn claimed(ob: &postroom_postgres::PgOutbox, relay: &str) -> Vec<postroom_core::MessageId> {
    ids(&ob.claim(relay, 10, Duration::from_secs(30)).await.unwrap())
}

fn ids_of(v: &[postroom_core::MessageId]) -> Vec<postroom_core::MessageId> {
    let mut v = v.to_vec();
    v.sort();
    v
}

#[tokio::test]
async fn an_aggregate_far_ahead_of_the_oldest_rows_goes_back_to_the_pool() {
    // A relay keeps an aggregate only while its next row is near the oldest due rows (ten
    // claim windows: 10,000 rows for a batch of one); past that the oldest rows go first.
    let (_db, s) = fresh_store().await;
    let mut msgs = vec![outgoing("hot", 1)];
    msgs.extend((0..12_000).map(|i| outgoing(&format!("cold-{i}"), 1)));
    msgs.push(outgoing("hot", 2));
    enqueue_in_one_transaction(&s, &msgs).await;
    let ob = s.outbox();
    let lease = Duration::from_secs(30);
    let first = ob.claim("r1", 1, lease).await.unwrap();
    assert_eq!(ids(&first), ids_of(&[msgs[0].id]));
    let next = ob
        .mark_and_claim("r1", &[msgs[0].id], 1, lease)
        .await
        .unwrap();
    assert_eq!(
        ids(&next),
        ids_of(&[msgs[1].id]),
        "the oldest row, not hot v2"
    );
}

#[tokio::test]
async fn a_mark_that_leaves_a_head_behind_wakes_waiting_relays() {
    let (_db, s) = fresh_store().await;
    let rows: Vec<_> = (1..=2).map(|v| outgoing("k", v)).collect();
    enqueue_in_one_transaction(&s, &rows).await;
    let ob = s.outbox();
    ob.wait_for_rows("warm-up", Duration::from_millis(500))
        .await;
    let lease = Duration::from_secs(30);
    assert_eq!(claimed(&ob, "a").await.len(), 1);
    // v2 is not due for a while (as after a failed publish): a's mark cannot keep it.
    ob.release("x", rows[1].id, "broker down", Duration::from_millis(700))
        .await
        .unwrap();
    assert!(claimed(&ob, "b").await.is_empty());
    let ob2 = ob.clone();
    let id = rows[0].id;
    let marker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ob2.mark_and_claim("a", &[id], 10, lease).await.unwrap()
    });
    let started = Instant::now();
    ob.wait_for_rows("b", Duration::from_secs(20)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by the mark that left v2 to the others"
    );
    assert!(marker.await.unwrap().is_empty(), "v2 was not due");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(claimed(&ob, "b").await, ids_of(&[rows[1].id]));
}

#[tokio::test]
async fn a_relay_that_found_nothing_still_sees_notified_and_silently_freed_rows() {
    // A scan that found nothing is not repeated at once unless a notification arrived; rows
    // freed without one (a lease given back, a delay ended) are seen within a short recheck.
    let (_db, s) = fresh_store().await;
    let rows: Vec<_> = ["x", "y"].iter().map(|k| outgoing(k, 1)).collect();
    enqueue_in_one_transaction(&s, &rows[0..=0]).await;
    let ob = s.outbox();
    ob.wait_for_rows("warm-up", Duration::from_millis(500))
        .await;
    assert_eq!(claimed(&ob, "a").await.len(), 1);
    assert!(claimed(&ob, "b").await.is_empty());
    // An insert notifies: b's wait ends and its next claim scans.
    enqueue_in_one_transaction(&s, &rows[1..=1]).await;
    ob.wait_for_rows("b", Duration::from_secs(20)).await;
    assert_eq!(claimed(&ob, "b").await, ids_of(&[rows[1].id]));
    assert!(claimed(&ob, "b").await.is_empty());
    // a gives its row back (no notification): b finds it once the recheck time has passed.
    ob.release("a", rows[0].id, "shutting down", Duration::ZERO)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(claimed(&ob, "b").await, ids_of(&[rows[0].id]));
}

#[tokio::test]
async fn a_claim_after_dense_heads_still_takes_only_heads() {
    // After a claim that found all it asked for, the next one locks rows before probing
    // their aggregates: it must still leave out rows whose predecessor is unpublished.
    let (_db, s) = fresh_store().await;
    let rows = enqueued(
        &s,
        &[
            ("d1", 1),
            ("d2", 1),
            ("d3", 1),
            ("d4", 1),
            ("x", 1),
            ("x", 2),
            ("y", 1),
            ("y", 2),
        ],
    )
    .await;
    let ob = s.outbox();
    let lease = Duration::from_secs(30);
    let first = ob.claim("r", 4, lease).await.unwrap();
    assert_eq!(
        ids(&first),
        ids_of(&[rows[0].id, rows[1].id, rows[2].id, rows[3].id])
    );
    let second = ob.claim("r", 4, lease).await.unwrap();
    assert_eq!(
        ids(&second),
        ids_of(&[rows[4].id, rows[6].id]),
        "x2 and y2 wait"
    );
    // The rows it locked and left (x2, y2) are free again: once x1 and y1 are published,
    // another relay claims them.
    ob.mark_published("r", &[rows[4].id, rows[6].id])
        .await
        .unwrap();
    let third = ob.claim("q", 4, lease).await.unwrap();
    assert_eq!(ids(&third), ids_of(&[rows[5].id, rows[7].id]));
}

#[tokio::test]
async fn a_mark_wakes_a_relay_that_found_only_claimed_heads() {
    let (_db, s) = fresh_store().await;
    let ob = s.outbox();
    let mut tx = s.begin().await.unwrap();
    for v in 1..=3 {
        outbox::enqueue(&mut tx, s.prefix(), &outgoing("k", v))
            .await
            .unwrap();
    }
    commit(tx).await.unwrap();
    // Start the listener before the claims (the first wait starts it).
    ob.wait_for_rows("warm-up", Duration::from_millis(500))
        .await;
    let lease = Duration::from_secs(30);
    let first = ob.claim("a", 10, lease).await.unwrap();
    assert_eq!(first.len(), 1, "only the head");
    // Relay b finds nothing: the head is a's. Its wait ends when a's mark commits.
    assert!(claimed(&ob, "b").await.is_empty());
    let ob2 = ob.clone();
    let id = first[0].id;
    let marker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        ob2.mark_published("a", &[id]).await.unwrap();
    });
    let started = Instant::now();
    ob.wait_for_rows("b", Duration::from_secs(20)).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(5),
        "woken by the mark's NOTIFY (sent after 500 ms), not before and not by the 20 s poll: {waited:?}"
    );
    marker.await.unwrap();
    let second = ob.claim("b", 10, lease).await.unwrap();
    assert_eq!(second.len(), 1, "the successor is the head now");
    // A mark that lands between an empty claim and the wait is not lost: the wait returns
    // at once.
    assert!(claimed(&ob, "a").await.is_empty());
    ob.mark_published("b", &[second[0].id]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    ob.wait_for_rows("a", Duration::from_secs(20)).await;
    assert!(started.elapsed() < Duration::from_secs(5), "not lost");
    assert_eq!(claimed(&ob, "a").await.len(), 1);
}

/// A producer that, 300 ms from now, commits one outbox row (version 1 of aggregate
/// `aggregate`) in a transaction of its own.
fn enqueue_after_300ms(store: &PgStore, aggregate: &str) -> tokio::task::JoinHandle<()> {
    let store = store.clone();
    let aggregate = aggregate.to_string();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut tx = store.begin().await.unwrap();
        outbox::enqueue(&mut tx, store.prefix(), &outgoing(&aggregate, 1))
            .await
            .unwrap();
        commit(tx).await.unwrap();
    })
}

#[tokio::test]
async fn a_relay_on_a_pool_of_one_connection_is_woken_by_an_insert() {
    // The listener has a connection of its own: taking it from a pool of one would leave
    // the relay nothing to claim with.
    let db = TestDb::create().await;
    let s = PgStore::from_pool(db.pool(1).await, TablePrefix::default());
    s.migrate().await.unwrap();
    let ob = s.outbox();
    ob.wait_for_rows("warm-up", Duration::from_millis(500))
        .await;
    let lease = Duration::from_secs(30);
    assert!(claimed(&ob, "r").await.is_empty());
    let producer = enqueue_after_300ms(&s, "one");
    let started = Instant::now();
    ob.wait_for_rows("r", Duration::from_secs(20)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by NOTIFY"
    );
    producer.await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), ob.claim("r", 10, lease))
        .await
        .expect("the claim gets the pool's one connection")
        .unwrap();
    assert_eq!(got.len(), 1);
}

#[tokio::test]
async fn one_transaction_can_enqueue_rows_for_many_aggregates() {
    // The per-aggregate commit-order locks share a bounded number of slots; one lock per key
    // would exhaust PostgreSQL's lock table (max_locks_per_transaction) long before this.
    let (_db, s) = fresh_store().await;
    let msgs: Vec<_> = (0..20_000)
        .map(|i| outgoing(&format!("many-{i}"), 1))
        .collect();
    enqueue_in_one_transaction(&s, &msgs).await;
    assert_eq!(s.outbox().pending().await.unwrap(), 20_000);
}

#[tokio::test]
async fn an_insert_wakes_a_waiting_relay() {
    let (_db, s) = fresh_store().await;
    let ob = s.outbox();
    // The first wait starts the listener; the second is the one measured.
    ob.wait_for_rows("r", Duration::from_millis(500)).await;
    let producer = enqueue_after_300ms(&s, "w");
    let started = Instant::now();
    ob.wait_for_rows("r", Duration::from_secs(20)).await;
    producer.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by NOTIFY, not by the 20 s poll"
    );
}

#[tokio::test]
async fn topic_patterns_route_like_the_reference_matcher() {
    let (_db, s) = fresh_store().await;
    let patterns = [
        "a.b",
        "a.*",
        "a.#",
        "#.c",
        "a.#.c",
        "#",
        "*",
        "#.*",
        "*.#",
        "order.created",
        "x-y.*",
    ];
    let keys = [
        "a",
        "a.b",
        "a.c",
        "a.b.c",
        "c",
        "x.c",
        "order.created",
        "orderXcreated",
        "x-y.z",
        "",
        "a.x.y.c",
    ];
    for p in patterns {
        for k in keys {
            let pg: bool = sqlx::query_scalar("SELECT $1 ~ $2")
                .bind(k)
                .bind(pattern::to_regex(p))
                .fetch_one(s.pool())
                .await
                .unwrap();
            assert_eq!(
                pg,
                pattern::matches(p, k),
                "pattern {p:?} key {k:?} regex {}",
                pattern::to_regex(p)
            );
        }
    }
}

#[tokio::test]
async fn queue_refuses_zero_prefetch_routes_and_reports_backlog() {
    let (_db, s) = fresh_store().await;
    let e = s.queue(PgQueue::defaults().prefetch(0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    let q = s
        .queue(
            PgQueue::defaults()
                .lease(Duration::from_secs(5))
                .prefetch(2),
        )
        .unwrap();
    let env = Envelope::builder("order.created", "t")
        .aggregate("order", "1", 1)
        .build();
    let e = q
        .publish(&OutgoingMessage::from_envelope(&env, "nobody.listens"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unroutable);
    let e = q
        .publish(&OutgoingMessage {
            route: Route::Consumer("ghost".into()),
            ..OutgoingMessage::from_envelope(&env, "x")
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unroutable);
    let mut sub = q.subscribe("inv", &["order.*", "#.created"]).await.unwrap();
    q.publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    q.publish(&OutgoingMessage::from_envelope(&env, "order.updated"))
        .await
        .unwrap();
    q.publish(&OutgoingMessage::from_envelope(&env, "order.deleted"))
        .await
        .unwrap();
    let b = q.backlog("inv").await.unwrap();
    assert_eq!(
        (b.ready, b.unacked, b.delayed),
        (3, 0, 0),
        "one copy each, though two patterns match the first"
    );
    assert!(b.oldest_ready_age.is_some());
    let d = sub.next(Duration::from_secs(1)).await.unwrap().unwrap();
    assert_eq!(d.message().routing_key, "order.created");
    let b = q.backlog("inv").await.unwrap();
    assert_eq!((b.ready, b.unacked), (1, 2), "prefetch 2 leases two rows");
    let plan = postroom_core::RetryPlan {
        attempt: 1,
        stage: 0,
        stage_delay: Duration::from_secs(60),
        delay: Duration::from_secs(60),
        error_class: ErrorClass::Transient,
        error_code: "x".into(),
        error_message: "y".into(),
    };
    d.retry(&plan).await.map_err(|(e, _)| e).unwrap();
    let b = q.backlog("inv").await.unwrap();
    assert_eq!((b.ready, b.unacked, b.delayed), (1, 1, 1));
}

/// Every message in `parking`, redriven ones included (up to 1000).
async fn every_parked_message(parking: &postroom_postgres::PgParking) -> Vec<ParkedMessage> {
    parking
        .search(
            &ParkingFilter {
                include_redriven: true,
                ..Default::default()
            },
            1000,
        )
        .await
        .unwrap()
}

fn parked(i: usize, consumer: &str) -> ParkedMessage {
    let now = chrono::Utc::now();
    ParkedMessage {
        message_id: MessageId::new(),
        consumer: consumer.into(),
        consumer_version: "1".into(),
        message_type: if i.is_multiple_of(3) {
            None
        } else {
            Some(format!("type.{}", i % 2))
        },
        schema_version: Some(1),
        attempts: 1,
        first_failure_at: now,
        parked_at: now
            - chrono::Duration::milliseconds(i as i64 * 1001)
            - chrono::Duration::nanoseconds(i as i64 * 37),
        error_class: [
            ErrorClass::Transient,
            ErrorClass::Permanent,
            ErrorClass::Unknown,
        ][i % 3],
        error_code: format!("code{}", i % 4),
        error_message: "e".into(),
        correlation_id: None,
        traceparent: None,
        routing_key: "rk".into(),
        producer: None,
        headers: Default::default(),
        body: vec![i as u8],
        status: ParkedStatus::Parked,
        redrive_count: 0,
    }
}

#[tokio::test]
async fn parking_filters_equal_the_reference_semantics() {
    let (_db, s) = fresh_store().await;
    let p = s.parking();
    for i in 0..24 {
        p.park(&parked(i, if i.is_multiple_of(2) { "c1" } else { "c2" }))
            .await
            .unwrap();
    }
    let all = every_parked_message(&p).await;
    assert_eq!(all.len(), 24);
    // Redrive a few so that the status criterion matters.
    let run = p
        .create_redrive_run(
            &ParkingFilter {
                error_code: Some("code1".into()),
                ..Default::default()
            },
            3,
            "op",
        )
        .await
        .unwrap();
    for m in p.redrive_pending(&run.id, 10).await.unwrap() {
        assert!(p.mark_redriven(&run.id, &m).await.unwrap());
    }
    let all = every_parked_message(&p).await;
    let mid = all[10].parked_at;
    let filters = vec![
        ParkingFilter::default(),
        ParkingFilter {
            include_redriven: true,
            ..Default::default()
        },
        ParkingFilter {
            message_type: Some("type.1".into()),
            ..Default::default()
        },
        ParkingFilter {
            error_class: Some(ErrorClass::Unknown),
            consumer: Some("c1".into()),
            ..Default::default()
        },
        ParkingFilter {
            error_code: Some("code1".into()),
            include_redriven: true,
            ..Default::default()
        },
        ParkingFilter {
            since: Some(mid),
            ..Default::default()
        },
        ParkingFilter {
            until: Some(mid),
            ..Default::default()
        },
        ParkingFilter {
            since: Some(mid + chrono::Duration::nanoseconds(1)),
            ..Default::default()
        },
        ParkingFilter {
            until: Some(mid + chrono::Duration::nanoseconds(1)),
            ..Default::default()
        },
        ParkingFilter {
            ids: vec![all[0].message_id, all[5].message_id, MessageId::new()],
            ..Default::default()
        },
    ];
    for f in filters {
        let want: Vec<MessageId> = all
            .iter()
            .filter(|m| f.matches(m))
            .map(|m| m.message_id)
            .collect();
        let got: Vec<MessageId> = p
            .search(&f, 1000)
            .await
            .unwrap()
            .iter()
            .map(|m| m.message_id)
            .collect();
        assert_eq!(got, want, "{f:?}");
        assert_eq!(p.count(&f).await.unwrap(), want.len() as u64, "{f:?}");
    }
    assert_eq!(
        p.purge(mid).await.unwrap(),
        10,
        "the ten parked before the eleventh oldest"
    );
}

/// The inbox's replay window: `inbox::purge` forgets only ids processed before the window, so
/// a copy within it is still a duplicate and one after it is applied again.
#[tokio::test]
async fn inbox_purge_forgets_only_ids_older_than_the_window() {
    let (_db, s) = fresh_store().await;
    cases::inbox::purge_forgets_only_ids_older_than_the_window(&s).await;
}

/// `inbox::apply_once`: the claim and a one-statement effect in one statement. A new id
/// applies the effect once; a copy claims nothing and changes nothing; a failing effect takes
/// the claim back with it (the next delivery applies it); concurrent copies apply it once; an
/// effect that does not read the claim is refused before anything runs.
#[tokio::test]
async fn apply_once_claims_and_applies_in_one_statement() {
    use postroom_core::InboxLookup;
    use postroom_postgres::inbox::apply_once;
    let (_db, s) = fresh_store().await;
    sqlx::query("CREATE TABLE stock (sku TEXT PRIMARY KEY, n BIGINT NOT NULL CHECK (n >= 0))")
        .execute(s.pool())
        .await
        .unwrap();
    const ADD: &str = "INSERT INTO stock (sku, n) SELECT $3, $4 FROM postroom_claim
        ON CONFLICT (sku) DO UPDATE SET n = stock.n + EXCLUDED.n;";
    let stock = async |sku: &str| -> Option<i64> {
        sqlx::query_scalar("SELECT n FROM stock WHERE sku = $1")
            .bind(sku)
            .fetch_optional(s.pool())
            .await
            .unwrap()
    };
    let add = async |id: MessageId, n: i64| {
        apply_once(s.prefix(), "inv", id, ADD)
            .unwrap()
            .bind("a")
            .bind(n)
            .execute(s.pool())
            .await
    };

    let first = MessageId::new();
    assert!(add(first, 5).await.unwrap(), "a new id applies");
    assert!(!add(first, 5).await.unwrap(), "a copy is a duplicate");
    assert_eq!(stock("a").await, Some(5), "the copy changed nothing");
    assert!(s.contains("inv", first).await.unwrap());

    // An effect of another shape; it fails (the check): the claim goes back with it, and the
    // next delivery of that id applies.
    const TAKE: &str = "UPDATE stock SET n = n - $3 FROM postroom_claim WHERE sku = $4";
    let take = async |id: MessageId, n: i64| {
        apply_once(s.prefix(), "inv", id, TAKE)
            .unwrap()
            .bind(n)
            .bind("a")
            .execute(s.pool())
            .await
    };
    let failing = MessageId::new();
    let e = take(failing, 10).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConstraintViolation, "{e}");
    assert!(
        !s.contains("inv", failing).await.unwrap(),
        "no claim without its effect"
    );
    assert_eq!(stock("a").await, Some(5));
    assert!(
        take(failing, 2).await.unwrap(),
        "the next delivery applies it"
    );
    assert_eq!(stock("a").await, Some(3));

    // Inside the caller's transaction: it commits, or here rolls back, with the rest.
    let moved = MessageId::new();
    let mut tx = s.begin().await.unwrap();
    let applied = apply_once(s.prefix(), "inv", moved, TAKE)
        .unwrap()
        .bind(1_i64)
        .bind("a")
        .execute(&mut *tx)
        .await
        .unwrap();
    assert!(applied);
    tx.rollback().await.unwrap();
    assert_eq!(
        stock("a").await,
        Some(3),
        "rolled back with the transaction"
    );
    assert!(!s.contains("inv", moved).await.unwrap());

    // Eight copies of one id at once: one applies.
    let raced = MessageId::new();
    let runs = (0..8).map(|_| add(raced, 1));
    let applied = futures::future::join_all(runs)
        .await
        .into_iter()
        .map(Result::unwrap)
        .filter(|a| *a)
        .count();
    assert_eq!(applied, 1, "one of eight concurrent copies applies");
    assert_eq!(stock("a").await, Some(4));

    // An effect that does not read the claim would run for duplicates: refused up front.
    let e = apply_once(
        s.prefix(),
        "inv",
        MessageId::new(),
        "UPDATE stock SET n = n + 1",
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("postroom_claim"), "{e}");
    assert_eq!(stock("a").await, Some(4));

    // Built once, applied to each message: the same claim and effect.
    let once = postroom_postgres::inbox::OnceEffect::new(s.prefix(), ADD).unwrap();
    let (one, two) = (MessageId::new(), MessageId::new());
    for id in [one, two, one] {
        once.apply("inv", id)
            .bind("a")
            .bind(10_i64)
            .execute(s.pool())
            .await
            .unwrap();
    }
    assert_eq!(stock("a").await, Some(24), "two new ids, one copy");
    assert!(
        postroom_postgres::inbox::OnceEffect::new(s.prefix(), "DELETE FROM stock").is_err(),
        "refused when built, before any message"
    );
}

/// Many inbox lookups at once answer exactly what one lookup at a time answers, in order,
/// across more pairs than one statement takes: the inbox and the inbox-queue's done rows
/// count, a queued row not yet done does not, and consumers are told apart.
#[tokio::test]
async fn many_inbox_lookups_at_once_agree_with_one_at_a_time() {
    use postroom_core::InboxLookup;
    let (_db, s) = fresh_store().await;
    let ids: Vec<MessageId> = (0..2_500).map(|_| MessageId::new()).collect();
    let every = |c: usize| -> Vec<MessageId> { ids.iter().copied().step_by(c).collect() };
    let mut tx = s.begin().await.unwrap();
    postroom_postgres::inbox::claim_many(&mut tx, s.prefix(), "inv", &every(3))
        .await
        .unwrap();
    postroom_postgres::inbox::claim_many(&mut tx, s.prefix(), "mail", &every(5))
        .await
        .unwrap();
    commit(tx).await.unwrap();
    // The inbox-queue mode: ids 1 and 2 stored for `mail`, only id 1 done.
    for (id, status) in [(ids[1], "done"), (ids[2], "pending")] {
        sqlx::query(&format!(
            "INSERT INTO {}inbox_queue (consumer, message_id, routing_key, body, status)
             VALUES ('mail', $1, 'r', '', $2)",
            s.prefix()
        ))
        .bind(id.as_uuid())
        .bind(status)
        .execute(s.pool())
        .await
        .unwrap();
    }
    let mut items: Vec<(&str, MessageId)> = ids
        .iter()
        .enumerate()
        .map(|(k, id)| (if k % 2 == 0 { "inv" } else { "mail" }, *id))
        .collect();
    items.push(("inv", ids[0]));
    items.push(("nobody", ids[0]));
    items.push(("mail", ids[2]));
    let many = cases::inbox::contains_each_as_one_at_a_time(&s, &items).await;
    assert!(many[1], "id 1 is done in `mail`'s inbox queue");
    assert!(!many[items.len() - 1], "id 2 is only queued for `mail`");
    let held = many.iter().filter(|h| **h).count();
    // Even positions ask `inv` (every sixth id applied), odd ones `mail` (odd multiples of
    // 5, and id 1 from the queue), then `inv` again for id 0.
    let want = (0..2_500).filter(|k| k % 6 == 0).count()
        + (0..2_500).filter(|k| k % 10 == 5).count()
        + 1
        + 1;
    assert_eq!(held, want);
    assert!(s.contains_each(&[]).await.unwrap().is_empty());
}

/// The outbox keeps a message's order under its aggregate key header, else its id: the same
/// rule as the SQLite outbox, and the key consumers order by, whether written one at a time,
/// in a batch or to send after the commit.
#[tokio::test]
async fn the_outbox_orders_a_message_under_its_aggregate_key_header_else_its_id() {
    let (_db, s) = fresh_store().await;
    let keyed = || outgoing("o1", 1);
    let bare = || {
        let mut m = outgoing("o1", 1);
        m.headers.clear();
        m
    };
    let (one, one_bare) = (keyed(), bare());
    let (batch, batch_bare) = (keyed(), bare());
    let (to_send, to_send_bare) = (keyed(), bare());
    let mut tx = s.begin().await.unwrap();
    outbox::enqueue(&mut tx, s.prefix(), &one).await.unwrap();
    outbox::enqueue(&mut tx, s.prefix(), &one_bare)
        .await
        .unwrap();
    outbox::enqueue_batch(&mut tx, s.prefix(), &[batch.clone(), batch_bare.clone()])
        .await
        .unwrap();
    let _leased = outbox::enqueue_to_send(
        &mut tx,
        s.prefix(),
        &[to_send.clone(), to_send_bare.clone()],
        "producer",
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    commit(tx).await.unwrap();
    for m in [one, batch, to_send] {
        assert_eq!(key_of(&s, m.id).await, "order:o1");
    }
    for m in [one_bare, batch_bare, to_send_bare] {
        assert_eq!(key_of(&s, m.id).await, m.id.to_string());
        assert_eq!(m.aggregate_key(), m.id.to_string());
    }
}

async fn key_of(s: &PgStore, id: MessageId) -> String {
    sqlx::query_scalar("SELECT aggregate_key FROM postroom_outbox WHERE id = $1")
        .bind(id.as_uuid())
        .fetch_one(s.pool())
        .await
        .unwrap()
}
