//! The source article's fault tests that need the business database, on any transport: the
//! handler claims the inbox row and applies the effect in one PostgreSQL transaction, and
//! PostgreSQL "goes down" for the handler by cutting a TCP path to the real server (a loopback
//! forwarder the test owns), never by stopping the shared server.
//!
//! The transport's consumer `inventory` must receive `order.created`; a transport with fixed
//! stage delays must keep the stages of the ladder the scenario names.

use crate::cases::publish_to;
use crate::recording::BROKER_CLOCK_RATE;
use crate::running::{Running, spawn};
use crate::servers::CuttablePath;
use crate::stores::pg_effects::{PgEffect, PgEffectsDb, inventory_config};
use crate::wait::until;
use postroom_core::consumer::Consumer;
use postroom_core::parking::ingest::ingest_dead_letters;
use postroom_core::{Envelope, ErrorClass, ParkingFilter, ParkingStore, Subscription, Transport};
use std::sync::Arc;
use std::time::Duration;

/// A scenario's start: a fresh effects database whose path is cut, the handler that reaches
/// it through that path, `inventory` (prefetch 4) consuming with `ladder` (as many retries as
/// stages), and one order published.
struct Outage {
    db: PgEffectsDb,
    path: CuttablePath,
    h: Arc<PgEffect>,
    running: Running,
    env: Envelope,
}

impl Outage {
    /// Cut the path, start the consumer on `transport` and publish the order `id`.
    async fn start(transport: &dyn Transport, ladder: &str, id: &str) -> Self {
        let db = PgEffectsDb::fresh().await;
        let path = CuttablePath::to_postgres().await;
        path.down();
        let h = db.handler(path.port);
        let consumer = Consumer::for_transport(
            inventory_config(ladder),
            h.clone(),
            &transport.capabilities(),
        )
        .unwrap();
        let sub = transport
            .subscribe(&Subscription::new("inventory", &["order.created"]).prefetch(4))
            .await
            .unwrap();
        let running = spawn(consumer, sub);
        let env = order(id);
        publish_to(transport.publisher(), &env, "order.created").await;
        Self {
            db,
            path,
            h,
            running,
            env,
        }
    }
}

fn order(id: &str) -> Envelope {
    Envelope::builder("order.created", "tests")
        .aggregate("order", id, 1)
        .data(serde_json::json!({ "order_id": id }))
        .build()
}

/// PostgreSQL down longer than the budget of the ladder `1s,2s`: one delivery per stage, each
/// no earlier than the failed attempt's return plus the stage's delay, then the message is
/// parked with the diagnostics of a lost database (ingested from the transport's dead-letter
/// place into a parking store); no effect.
pub async fn postgres_down_longer_than_the_budget_walks_every_stage_then_parks(
    transport: Arc<dyn Transport>,
) {
    let o = Outage::start(transport.as_ref(), "1s,2s", "down-1").await;
    let Running { stop, task, stats } = o.running;
    until(
        Duration::from_secs(30),
        "the message to be parked",
        async || !stats.snapshot().parked_by_code.is_empty(),
    )
    .await;
    // Nothing more arrives: no hot loop.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop.send(true);
    task.await.unwrap();
    let calls = o.h.calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![0, 1, 2],
        "one delivery per stage, then parked"
    );
    // Each retry measured from the return of the attempt that failed, not from its entry
    // (the failed attempt's handling time would hide a retry that came early), on this
    // process's clock: the broker's may run up to BROKER_CLOCK_RATE faster while it keeps the
    // delay.
    let returned = o.h.returned.lock().unwrap().clone();
    for (stage, delay) in [(1, Duration::from_secs(1)), (2, Duration::from_secs(2))] {
        let waited = calls[stage].1 - returned[stage - 1];
        assert!(
            waited >= delay.mul_f64(1.0 - BROKER_CLOCK_RATE),
            "stage {delay:?} kept its delay: attempt {stage} came {waited:?} after the failure"
        );
    }
    let s = stats.snapshot();
    assert_eq!(s.retries_by_stage.get(&0), Some(&1));
    assert_eq!(s.retries_by_stage.get(&1), Some(&1));
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        postroom_sqlite::SqliteStore::open(dir.path().join("parking.db"))
            .await
            .unwrap(),
    );
    let n = ingest_dead_letters(
        transport.as_ref(),
        "inventory",
        store.clone(),
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    assert_eq!(n, 1, "one record ingested");
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, o.env.id);
    assert_eq!(p.attempts, 3);
    assert_eq!(p.error_class, ErrorClass::Transient);
    assert!(
        ["connection", "timeout", "io"].contains(&p.error_code.as_str()),
        "{}",
        p.error_code
    );
    assert!(
        p.first_failure_at <= p.parked_at - chrono::Duration::seconds(2),
        "the first failure time is the first delivery's, kept across the retries"
    );
    o.path.restore();
    assert_eq!(o.db.effects("down-1").await, 0);
}

/// PostgreSQL back before the budget of the ladder `1s,3s` ends: two failed attempts, then
/// the message is applied once and nothing is parked.
pub async fn postgres_back_before_the_budget_ends_is_processed_once(transport: Arc<dyn Transport>) {
    let o = Outage::start(transport.as_ref(), "1s,3s", "back-1").await;
    let Running { stop, task, stats } = o.running;
    until(Duration::from_secs(15), "two failed attempts", async || {
        o.h.calls.lock().unwrap().len() >= 2
    })
    .await;
    o.path.restore();
    until(
        Duration::from_secs(20),
        "processing after recovery",
        async || stats.snapshot().applied == 1,
    )
    .await;
    let _ = stop.send(true);
    task.await.unwrap();
    assert!(stats.snapshot().parked_by_code.is_empty());
    assert_eq!(o.db.effects("back-1").await, 1);
}
