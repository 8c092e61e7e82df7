//! One active WAL relay per slot, the others standing by: two relay processes on one slot,
//! the active one stuck between its broker's confirms and the slot's advance and then
//! SIGKILLed; the standby takes over within the stated time, republishes what the dead one
//! had not advanced past (the same ids, absorbed by the inbox), and nothing is lost.
//!
//! The relays are this test binary re-run as children; they publish to the queue transport
//! in the cluster's tables and log each confirmed publish to `broker_log`.

mod wal_common;

use postroom_core::failpoint::{self, Action};
use postroom_core::{OutgoingMessage, Publisher, Result, Transport, async_trait};
use postroom_postgres::wal::{TAKEOVER_AFTER_CRASH, WalRelay};
use postroom_postgres::{PgStore, inbox, map_error};
use postroom_testkit::child::this_test_again;
use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wal_common::*;

const WORKER_URL: &str = "POSTROOM_WAL_WORKER_URL";
const WORKER_ID: &str = "POSTROOM_WAL_WORKER_ID";
const TEST: &str = "a_standby_takes_over_from_a_relay_killed_between_publish_and_advance";

/// The queue's publisher, logging each confirmed publish with the relay's name.
struct DbLogged {
    store: PgStore,
    inner: Arc<dyn Publisher>,
    relay: String,
}

#[async_trait]
impl Publisher for DbLogged {
    async fn publish(&self, m: &OutgoingMessage) -> Result<()> {
        self.inner.publish(m).await?;
        sqlx::query("INSERT INTO broker_log (relay, message_id) VALUES ($1, $2)")
            .bind(&self.relay)
            .bind(m.id.as_uuid())
            .execute(self.store.pool())
            .await
            .map_err(map_error)?;
        Ok(())
    }
}

fn worker(url: String, id: String) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = PgStore::connect(&url).await.unwrap();
        let queue = store.queue(postroom_postgres::PgQueue::defaults()).unwrap();
        let publisher = Arc::new(DbLogged {
            store: store.clone(),
            inner: queue.publisher(),
            relay: id.clone(),
        });
        if id == "doomed" {
            // Stuck for good at its first advance: what it published is never advanced past.
            failpoint::arm_for(
                failpoint::WAL_BEFORE_ADVANCE,
                "doomed",
                Action::Call(Arc::new(|| Box::pin(std::future::pending::<()>()))),
                0,
                None,
            );
        }
        let relay = WalRelay::new(&store, publisher, config(&id)).unwrap();
        let (_never, rx) = tokio::sync::watch::channel(false);
        relay.run(rx).await;
    });
}

fn spawn(url: &str, id: &str) -> Child {
    this_test_again(TEST)
        .env(WORKER_URL, url)
        .env(WORKER_ID, id)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn a relay process")
}

async fn logged_by(store: &PgStore, relay: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM broker_log WHERE relay = $1")
        .bind(relay)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[test]
fn a_standby_takes_over_from_a_relay_killed_between_publish_and_advance() {
    if let (Ok(url), Ok(id)) = (std::env::var(WORKER_URL), std::env::var(WORKER_ID)) {
        worker(url, id);
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(scenario());
}

async fn scenario() {
    let db = Logical::start().await;
    let queue = db.queue().await;
    sqlx::raw_sql("CREATE TABLE broker_log (seq BIGSERIAL PRIMARY KEY, relay TEXT NOT NULL, message_id UUID NOT NULL)")
        .execute(db.store.pool())
        .await
        .unwrap();
    WalRelay::new(&db.store, queue.publisher(), config("setup"))
        .unwrap()
        .prepare()
        .await
        .unwrap();
    let url = db.cluster.url("postgres");
    let mut produced: Vec<OutgoingMessage> = Vec::new();
    let mut produce_some = async |from: u64, n: u64| {
        let batch: Vec<OutgoingMessage> = (from..from + n)
            .flat_map(|v| [order("x", v), order("y", v)])
            .collect();
        produce(&db.store, &batch, true).await;
        produced.extend(batch);
    };
    produce_some(1, 5).await;
    let mut doomed = spawn(&url, "doomed");
    postroom_testkit::wait::until(
        Duration::from_secs(30),
        "the doomed relay publishing",
        async || logged_by(&db.store, "doomed").await > 0,
    )
    .await;
    let mut standby = spawn(&url, "standby");
    // The standby is up and refused the slot at least once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        logged_by(&db.store, "standby").await,
        0,
        "one active relay per slot"
    );
    produce_some(6, 5).await;
    doomed.kill().expect("SIGKILL the active relay");
    let _ = doomed.wait();
    let killed = Instant::now();
    postroom_testkit::wait::until(
        Duration::from_secs(30),
        "the standby taking over",
        async || logged_by(&db.store, "standby").await > 0,
    )
    .await;
    let took = killed.elapsed();
    eprintln!("the standby took over {took:?} after the SIGKILL");
    assert!(
        took <= TAKEOVER_AFTER_CRASH,
        "took over after {took:?}, stated {TAKEOVER_AFTER_CRASH:?}"
    );
    produce_some(11, 5).await;
    let want: BTreeSet<uuid::Uuid> = produced.iter().map(|m| m.id.as_uuid()).collect();
    postroom_testkit::wait::until(
        Duration::from_secs(60),
        "everything published",
        async || {
            let got: Vec<uuid::Uuid> =
                sqlx::query_scalar("SELECT DISTINCT message_id FROM broker_log")
                    .fetch_all(db.store.pool())
                    .await
                    .unwrap();
            got.len() == want.len()
        },
    )
    .await;
    standby.kill().unwrap();
    let _ = standby.wait();
    let again: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM broker_log d WHERE d.relay = 'doomed'
           AND EXISTS (SELECT 1 FROM broker_log s WHERE s.relay = 'standby' AND s.message_id = d.message_id)",
    )
    .fetch_one(db.store.pool())
    .await
    .unwrap();
    assert_eq!(
        again,
        logged_by(&db.store, "doomed").await,
        "what the dead relay published went out again"
    );
    // The consumer's inbox absorbs the copies: each message applies once.
    let delivered: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT message_id FROM postroom_queue ORDER BY id")
            .fetch_all(db.store.pool())
            .await
            .unwrap();
    let (mut applied, mut duplicates) = (0, 0);
    for id in &delivered {
        let mut tx = db.store.begin().await.unwrap();
        if inbox::claim(&mut tx, db.store.prefix(), "inventory", (*id).into())
            .await
            .unwrap()
        {
            applied += 1;
        } else {
            duplicates += 1;
        }
        postroom_postgres::commit(tx).await.unwrap();
    }
    assert_eq!(applied, want.len(), "each message applied once");
    assert!(duplicates > 0, "the republished copies were absorbed");
    let got: BTreeSet<uuid::Uuid> = delivered.into_iter().collect();
    assert_eq!(got, want, "nothing lost");
}
