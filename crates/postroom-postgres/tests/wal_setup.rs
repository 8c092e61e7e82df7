//! What the WAL relay needs from the server, created where postroom may and explained where
//! not; a slot dropped or invalidated under it is an error with the way back, and the way
//! back republishes what the slot had not passed; retention removes the rows the slot passed.

mod wal_common;

use postroom_core::{ErrorKind, OutgoingMessage};
use postroom_postgres::wal::WalRelay;
use postroom_postgres::{PgStore, TablePrefix};
use postroom_testkit::servers::TestDb;
use std::time::Duration;
use wal_common::*;

async fn execute(store: &PgStore, sql: &str) {
    sqlx::raw_sql(sql).execute(store.pool()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_logical_decoding_is_explained() {
    // The shared server runs with wal_level = replica.
    let db = TestDb::create().await;
    let store = PgStore::from_pool(db.pool(2).await, TablePrefix::default());
    store.migrate().await.unwrap();
    let queue = store.queue(postroom_postgres::PgQueue::defaults()).unwrap();
    let relay = WalRelay::new(&store, Logged::on(&queue), config("replica")).unwrap();
    let e = relay.prepare().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    let text = e.to_string();
    assert!(
        text.contains("wal_level")
            && text.contains("logical")
            && text.contains("rds.logical_replication"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_rights_are_explained() {
    let db = Logical::start().await;
    // A role that neither owns the outbox nor may read slots.
    execute(
        &db.store,
        "CREATE ROLE app LOGIN; GRANT ALL ON ALL TABLES IN SCHEMA public TO app",
    )
    .await;
    let url = db.cluster.url("postgres").replace("postgres@", "app@");
    let app = PgStore::connect(&url).await.unwrap();
    let queue = db.queue().await;
    let relay = WalRelay::new(&app, Logged::on(&queue), config("app")).unwrap();
    let e = relay.prepare().await.unwrap_err().to_string();
    assert!(
        e.contains("CREATE PUBLICATION") && e.contains("owner"),
        "{e}"
    );
    // The owner creates the publication; the slot still needs REPLICATION.
    execute(&db.store, "CREATE PUBLICATION postroom_outbox_wal FOR TABLE postroom_outbox WITH (publish = 'insert')").await;
    let e = relay.prepare().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    let e = e.to_string();
    assert!(
        e.contains("REPLICATION") && e.contains("rds_replication"),
        "{e}"
    );
    execute(&db.store, "ALTER ROLE app REPLICATION").await;
    relay.prepare().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_slot_is_an_error_and_recreating_it_republishes_what_it_had_not_passed() {
    let db = Logical::start().await;
    let queue = db.queue().await;
    let publisher = Logged::on(&queue);
    let relay = WalRelay::new(&db.store, publisher.clone(), config("dropped")).unwrap();
    relay.prepare().await.unwrap();
    let published: Vec<OutgoingMessage> = (1..=3).map(|v| order("p", v)).collect();
    produce(&db.store, &published, true).await;
    let running =
        Running::start(WalRelay::new(&db.store, publisher.clone(), config("dropped")).unwrap());
    all_confirmed(&publisher, &published, Duration::from_secs(20)).await;
    running.stop().await;
    // Dropped while no relay ran, and written to meanwhile: those messages were never read.
    slot_unread(&db.store).await;
    execute(
        &db.store,
        "SELECT pg_drop_replication_slot('postroom_outbox_wal')",
    )
    .await;
    let unread: Vec<OutgoingMessage> = (4..=6).map(|v| order("p", v)).collect();
    produce(&db.store, &unread, true).await;
    let e = relay.prepare().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    let text = e.to_string();
    assert!(
        text.contains("was dropped") && text.contains("recreate"),
        "{text}"
    );
    let republished = relay.recreate_slot().await.unwrap();
    assert!(republished >= unread.len() as u64, "{republished}");
    let ids = publisher.ids();
    assert!(
        unread.iter().all(|m| ids.contains(&m.id)),
        "the unread rows were republished"
    );
    assert_aggregate_order(&publisher.confirmed()[published.len()..]);
    // And the relay goes on from the new slot.
    let next = [order("p", 7)];
    let running = Running::start(relay);
    produce(&db.store, &next, true).await;
    all_confirmed(&publisher, &next, Duration::from_secs(20)).await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidated_slot_is_an_error_with_the_way_back() {
    // A slot bounded to 1 MB of log behind the server: a backlog past it invalidates it.
    let db = Logical::start_with(&[("max_slot_wal_keep_size", "1MB")]).await;
    let queue = db.queue().await;
    let publisher = Logged::on(&queue);
    let relay = WalRelay::new(&db.store, publisher.clone(), config("bounded")).unwrap();
    relay.prepare().await.unwrap();
    let backlog: Vec<OutgoingMessage> = (1..=20).map(|v| order("b", v)).collect();
    produce(&db.store, &backlog, true).await;
    execute(&db.store, "CREATE TABLE filler (x text)").await;
    for _ in 0..4 {
        execute(&db.store, "INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 3000); SELECT pg_switch_wal()").await;
    }
    execute(&db.store, "CHECKPOINT").await;
    let status: String = sqlx::query_scalar(
        "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'postroom_outbox_wal'",
    )
    .fetch_one(db.store.pool())
    .await
    .unwrap();
    assert_eq!(status, "lost", "the server invalidated the slot");
    let e = relay.prepare().await.unwrap_err().to_string();
    assert!(e.contains("invalidated") && e.contains("recreate"), "{e}");
    assert_eq!(relay.recreate_slot().await.unwrap(), backlog.len() as u64);
    assert_published_exactly(&backlog, &publisher.ids());
    assert_aggregate_order(&publisher.confirmed());
    relay.prepare().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_in_bulk_only_the_rows_the_slot_passed() {
    let db = Logical::start().await;
    let queue = db.queue().await;
    let publisher = Logged::on(&queue);
    let cfg = || postroom_postgres::WalRelayConfig {
        retention: Some(Duration::ZERO),
        ..config("retention")
    };
    let relay = WalRelay::new(&db.store, publisher.clone(), cfg()).unwrap();
    relay.prepare().await.unwrap();
    let passed: Vec<OutgoingMessage> = (1..=5).map(|v| order("t", v)).collect();
    produce(&db.store, &passed, true).await;
    let running = Running::start(relay);
    all_confirmed(&publisher, &passed, Duration::from_secs(20)).await;
    running.stop().await;
    // Rows the slot has not passed: written while no relay runs.
    let waiting: Vec<OutgoingMessage> = (6..=7).map(|v| order("t", v)).collect();
    produce(&db.store, &waiting, true).await;
    // The next relay's first retention pass runs soon after it starts; hold the publisher
    // off so that the waiting rows stay unpublished meanwhile.
    let held = Logged::new(std::sync::Arc::new(NeverConfirms));
    let running = Running::start(WalRelay::new(&db.store, held, cfg()).unwrap());
    postroom_testkit::wait::until(
        Duration::from_secs(20),
        "the passed rows deleted",
        async || {
            let left: i64 = sqlx::query_scalar("SELECT count(*) FROM postroom_outbox")
                .fetch_one(db.store.pool())
                .await
                .unwrap();
            left == waiting.len() as i64
        },
    )
    .await;
    running.stop().await;
    let left: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM postroom_outbox ORDER BY seq")
        .fetch_all(db.store.pool())
        .await
        .unwrap();
    assert_eq!(
        left,
        waiting.iter().map(|m| m.id.as_uuid()).collect::<Vec<_>>()
    );
}

/// Wait until the server let go of the slot of a relay that stopped.
async fn slot_unread(store: &PgStore) {
    postroom_testkit::wait::until(Duration::from_secs(10), "the slot let go", async || {
        let active: bool = sqlx::query_scalar(
            "SELECT active FROM pg_replication_slots WHERE slot_name = 'postroom_outbox_wal'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        !active
    })
    .await;
}

/// A broker that never confirms (a publish fails at once).
struct NeverConfirms;

#[postroom_core::async_trait]
impl postroom_core::Publisher for NeverConfirms {
    async fn publish(&self, _: &OutgoingMessage) -> postroom_core::Result<()> {
        Err(postroom_core::Error::new(
            ErrorKind::Connection,
            "the broker is down",
        ))
    }
}
