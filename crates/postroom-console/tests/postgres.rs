//! The console's store needs on both stores: listing queries (error text, archive) have the
//! reference semantics of `ParkingQuery::matches` on SQLite and PostgreSQL alike; and the
//! console over PostgreSQL (parked by the real consumer loop on the table queue) groups,
//! redrives a group to the end and audits it.

mod common;

use chrono::{DateTime, Utc};
use common::{logged_in, serve_backend, users, wait_for, wait_for_run_end};
use postroom_console::{Auth, ParkingConsole, PgBackend, SqliteBackend};
use postroom_core::{
    AuditLog, Consumer, ConsumerConfig, Envelope, EnvelopeDecoder, ErrorClass, Handled, Handler,
    HandlerError, Incoming, MessageId, ParkedMessage, ParkedStatus, ParkingFilter, ParkingQuery,
    ParkingStore, Subscription, Transport, async_trait,
};
use postroom_postgres::{PgQueue, PgStore};
use postroom_testkit::cases::publish_to;
use postroom_testkit::servers::TestDb;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn record(i: i64, consumer: &str, code: &str, message: &str) -> ParkedMessage {
    let t = DateTime::from_timestamp(1_800_000_000 + i * 60, 0).unwrap();
    ParkedMessage {
        message_id: MessageId::new(),
        consumer: consumer.into(),
        consumer_version: "1".into(),
        message_type: Some(
            if i % 2 == 0 {
                "order.created"
            } else {
                "order.paid"
            }
            .into(),
        ),
        schema_version: Some(1),
        attempts: 1,
        first_failure_at: t,
        parked_at: t,
        error_class: if code == "db_down" {
            ErrorClass::Transient
        } else {
            ErrorClass::Permanent
        },
        error_code: code.into(),
        error_message: message.into(),
        correlation_id: None,
        traceparent: None,
        routing_key: "order.created".into(),
        producer: Some("shop".into()),
        headers: Default::default(),
        body: b"{}".to_vec(),
        status: ParkedStatus::Parked,
        redrive_count: 0,
    }
}

fn records() -> Vec<ParkedMessage> {
    vec![
        record(0, "inventory", "bad_payload", "order 1 has no SKU"),
        record(1, "inventory", "bad_payload", "order 2 has no sku"),
        record(2, "inventory", "db_down", "Connection refused by db-7"),
        record(3, "billing", "bad_payload", "order 3 has no sku; 100% sure"),
        record(4, "billing", "bad_total", "total_amount is negative"),
        record(5, "billing", "bad_total", "totalXamount is negative"),
        record(6, "inventory", "bad_payload", "Données invalides: ÉTÉ"),
        record(7, "inventory", "db_down", "connection reset"),
    ]
}

fn queries() -> Vec<ParkingQuery> {
    let text = |t: &str| ParkingQuery {
        text: Some(t.into()),
        ..ParkingQuery::default()
    };
    let mut all = vec![
        ParkingQuery::default(),
        text("sku"),
        text("NO   Sku"),
        text("100%"),
        text("total_amount"),
        text("connection"),
        text("été"),
        text("données"),
        text("nothing matches this"),
        ParkingQuery {
            archived: true,
            ..ParkingQuery::default()
        },
        ParkingQuery {
            filter: ParkingFilter {
                consumer: Some("billing".into()),
                error_class: Some(ErrorClass::Permanent),
                ..ParkingFilter::default()
            },
            text: Some("negative".into()),
            archived: false,
        },
    ];
    all.push(ParkingQuery {
        filter: ParkingFilter {
            since: Some(DateTime::from_timestamp(1_800_000_000 + 120, 0).unwrap()),
            until: Some(DateTime::from_timestamp(1_800_000_000 + 420, 0).unwrap()),
            ..ParkingFilter::default()
        },
        ..ParkingQuery::default()
    });
    all
}

/// Park the records, archive two, and compare every query with the reference.
async fn check_semantics(store: &dyn ParkingStore, console: &dyn ParkingConsole) {
    let console = console.lot();
    let rs = records();
    for r in &rs {
        store.park(r).await.expect("park");
    }
    let archived: Vec<(String, MessageId)> = [&rs[1], &rs[4]]
        .iter()
        .map(|r| (r.consumer.clone(), r.message_id))
        .collect();
    let purge_after = Utc::now() + chrono::Duration::days(1);
    assert_eq!(
        console
            .archive_parked(&archived, "test", purge_after)
            .await
            .unwrap(),
        2
    );
    for q in queries() {
        let want: BTreeSet<MessageId> = rs
            .iter()
            .filter(|r| {
                let is_archived = archived
                    .iter()
                    .any(|(c, id)| c == &r.consumer && *id == r.message_id);
                q.matches(r, is_archived)
            })
            .map(|r| r.message_id)
            .collect();
        let got: BTreeSet<MessageId> = console
            .query_parked(&q, 0, 100)
            .await
            .unwrap()
            .iter()
            .map(|m| m.message_id)
            .collect();
        assert_eq!(got, want, "query {q:?}");
        assert_eq!(
            console.count_parked(&q).await.unwrap(),
            want.len() as u64,
            "count {q:?}"
        );
        let summaries = console.parked_summaries(&q, 100).await.unwrap();
        assert_eq!(summaries.len(), want.len(), "summaries {q:?}");
    }
    // Parking an archived message again shows it again.
    let mut again = rs[1].clone();
    again.parked_at += chrono::Duration::seconds(1);
    store.park(&again).await.unwrap();
    assert_eq!(
        console
            .count_parked(&ParkingQuery::default())
            .await
            .unwrap(),
        7
    );
    // Purge deletes archived copies only once their retention ended.
    assert_eq!(console.purge_archived(Utc::now()).await.unwrap(), 0);
    assert_eq!(console.purgeable(purge_after).await.unwrap(), 1);
    assert_eq!(console.purge_archived(purge_after).await.unwrap(), 1);
    assert!(store.get(rs[4].message_id).await.unwrap().is_empty());
    assert_eq!(
        store.get(rs[1].message_id).await.unwrap().len(),
        1,
        "the copy parked again stays"
    );
}

/// Append 25 audit entries about two targets, then read those of one a page at a time: the
/// pages hold every entry once, newest first.
async fn check_audit_pages(console: &dyn ParkingConsole) {
    let audit = console.lot();
    let mut ids = Vec::new();
    for i in 0..25 {
        let target = if i % 2 == 0 { "a" } else { "b" };
        let id = audit
            .append_audit(&postroom_core::AuditEntry {
                id: 0,
                at: Utc::now(),
                actor: "test".into(),
                action: "archive".into(),
                target: target.into(),
                detail: serde_json::json!({"i": i}),
            })
            .await
            .unwrap();
        if target == "a" {
            ids.push(id);
        }
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = audit.audit_page(Some("a"), before, 5).await.unwrap();
        seen.extend(page.iter().map(|e| e.id));
        match page.last() {
            Some(last) if page.len() == 5 => before = Some(last.id),
            _ => break,
        }
    }
    assert_eq!(seen, ids, "pages of target a");
    let newest = audit.audit_entries(None, 3).await.unwrap();
    assert_eq!(newest.len(), 3);
    assert_eq!(newest[0].detail["i"], 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_queries_have_the_reference_semantics_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = postroom_sqlite::SqliteStore::open(dir.path().join("q.db"))
        .await
        .unwrap();
    let backend = SqliteBackend::new(store.clone());
    check_semantics(&store, &backend).await;
    check_audit_pages(&backend).await;
}

async fn pg() -> (TestDb, PgStore) {
    let db = TestDb::create().await;
    let store = PgStore::connect(&db.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    (db, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_queries_have_the_reference_semantics_on_postgres() {
    let (_db, store) = pg().await;
    let queue = store.queue(PgQueue::defaults()).unwrap();
    let backend = PgBackend::new(store.clone(), Arc::new(queue));
    check_semantics(&store.parking(), &backend).await;
    check_audit_pages(&backend).await;
}

struct NoSku;

#[async_trait]
impl Handler for NoSku {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        if m.envelope.data["sku"].is_null() {
            return Err(HandlerError::permanent(
                "bad_payload",
                format!("order {} has no sku", m.envelope.data["order"]),
            ));
        }
        Ok(Handled::Applied)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_on_postgres_groups_redrives_and_audits() {
    let (_db, store) = pg().await;
    let queue = store.queue(PgQueue::defaults()).unwrap();
    let subscription = Subscription::new("inventory", &["order.*"]);
    Transport::bind(&queue, &subscription).await.unwrap();
    for n in 0..3 {
        let e = Envelope::builder("order.created", "shop")
            .aggregate("order", format!("o-{n}"), 1)
            .data(serde_json::json!({"order": n, "sku": null}))
            .build();
        publish_to(queue.publisher(), &e, "order.created").await;
    }
    let consumer = Consumer::for_transport(
        ConsumerConfig::new(
            "inventory",
            EnvelopeDecoder::new().accept("order.created", 1..=1),
        ),
        Arc::new(NoSku),
        &queue.capabilities(),
    )
    .unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = {
        let queue = queue.clone();
        let subscription = subscription.clone();
        tokio::spawn(async move { consumer.run_on(&queue, &subscription, shutdown).await })
    };
    let parking = store.parking();
    wait_for(Duration::from_secs(60), "three parked messages", || async {
        parking.count(&ParkingFilter::default()).await.unwrap_or(0) == 3
    })
    .await;
    stop.send_replace(true);
    run.await.unwrap().unwrap();

    let backend = Arc::new(PgBackend::new(store.clone(), Arc::new(queue)));
    let (base, _stop) = serve_backend(backend, Auth::Users(users())).await;
    let mut a = logged_in(&base, "operator").await;
    let (_, page, _) = a.get("/groups").await;
    assert!(
        page.contains(r#"<span id="group-count">1</span>"#),
        "{page}"
    );
    let key = a.group_key().await;
    let (_, page, _) = a.post("/redrive/preview", &[("group", &key)], true).await;
    assert!(
        page.contains(r#"<strong id="preview-count">3</strong>"#),
        "{page}"
    );
    let (_, run_id) = a.start_run(&key, "50").await;
    wait_for_run_end(&parking, &run_id).await;
    assert_eq!(
        parking.run_control(&run_id).await.unwrap().unwrap().state,
        postroom_core::RunState::Finished
    );
    assert_eq!(parking.redrive_run(&run_id).await.unwrap().unwrap().done, 3);
    let audit = parking.audit_entries(Some(&run_id), 10).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["redrive.end", "redrive.start"]);
    assert_eq!(audit[1].actor, "operator");
    let (_, page, _) = a.get("/pipeline").await;
    assert!(
        page.contains(r#"<td>inventory</td><td class="ready">3</td>"#),
        "the redriven messages wait in the queue: {page}"
    );
}
