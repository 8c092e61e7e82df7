//! The WAL relay against a PostgreSQL cluster of the test's own (`wal_level = logical`),
//! publishing to the queue transport in the same store's tables: only committed
//! transactions are published; the slot advances only past what was confirmed, so a relay
//! that dies between publish and advance leaves its messages to the next one, with the same
//! ids; per-aggregate order holds across a failed publish inside a pipelined window.

mod wal_common;

use postroom_core::failpoint::{self, Action};
use postroom_core::{MessageId, OutgoingMessage};
use postroom_postgres::wal::WalRelay;
use std::collections::BTreeSet;
use std::time::Duration;
use wal_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_committed_transactions_are_published() {
    let db = Logical::start().await;
    let queue = db.queue().await;
    let publisher = Logged::on(&queue);
    let relay = WalRelay::new(&db.store, publisher.clone(), config("committed")).unwrap();
    relay.prepare().await.unwrap();
    let running = Running::start(relay);
    let committed: Vec<OutgoingMessage> = (1..=3).map(|v| order("c", v)).collect();
    let rolled_back: Vec<OutgoingMessage> = (1..=3).map(|v| order("r", v)).collect();
    produce(&db.store, &committed[..2], true).await;
    produce(&db.store, &rolled_back, false).await;
    produce(&db.store, &committed[2..], true).await;
    all_confirmed(&publisher, &committed, Duration::from_secs(20)).await;
    // A later commit is published after the rolled-back one would have been: by then the
    // rolled-back messages would have come too.
    let marker = [order("m", 1)];
    produce(&db.store, &marker, true).await;
    all_confirmed(&publisher, &marker, Duration::from_secs(20)).await;
    let mut expected = committed.clone();
    expected.extend(marker);
    assert_published_exactly(&expected, &publisher.ids());
    assert_eq!(
        publisher.confirmed().len(),
        expected.len(),
        "each message published once"
    );
    running.stop().await;
    // Nothing was written per message: no row was updated or deleted.
    let unmarked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM postroom_outbox WHERE published_at IS NULL AND publish_attempts = 0 AND locked_by IS NULL",
    )
    .fetch_one(db.store.pool())
    .await
    .unwrap();
    assert_eq!(unmarked, expected.len() as i64);
}

#[test]
#[should_panic(expected = "published but not expected")]
fn the_published_ids_check_catches_a_rolled_back_message() {
    let committed = [order("c", 1)];
    let rolled_back = order("r", 1);
    let got: BTreeSet<MessageId> = [committed[0].id, rolled_back.id].into();
    assert_published_exactly(&committed, &got);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_dying_between_publish_and_advance_leaves_the_messages_to_the_next_one() {
    let db = Logical::start().await;
    let queue = db.queue().await;
    let messages: Vec<OutgoingMessage> = (1..=5).map(|v| order("k", v)).collect();
    // The doomed relay publishes, and dies before it advances the slot.
    failpoint::arm_for(
        failpoint::WAL_BEFORE_ADVANCE,
        "doomed",
        Action::Panic,
        0,
        Some(1),
    );
    let first = Logged::on(&queue);
    let relay = WalRelay::new(&db.store, first.clone(), config("doomed")).unwrap();
    relay.prepare().await.unwrap();
    let slot = relay.slot().to_string();
    let before = slot_position(&db.store, &slot).await;
    produce(&db.store, &messages, true).await;
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let died = tokio::spawn(async move { relay.run(rx).await }).await;
    assert!(
        died.expect_err("the relay dies at its crash point")
            .is_panic()
    );
    assert_eq!(failpoint::hits(failpoint::WAL_BEFORE_ADVANCE, "doomed"), 1);
    assert!(
        !first.confirmed().is_empty(),
        "the broker confirmed before the relay died"
    );
    assert_eq!(
        slot_position(&db.store, &slot).await,
        before,
        "the slot did not advance past what the dead relay published"
    );
    // The next relay reads from the slot's position: the same messages, the same ids.
    let second = Logged::on(&queue);
    let running = Running::start(WalRelay::new(&db.store, second.clone(), config("next")).unwrap());
    all_confirmed(&second, &messages, Duration::from_secs(30)).await;
    running.stop().await;
    let again: BTreeSet<MessageId> = first.ids().intersection(&second.ids()).copied().collect();
    assert_eq!(
        again,
        first.ids(),
        "everything the dead relay published went out again"
    );
    assert_published_exactly(&messages, &second.ids());
    assert_aggregate_order(&second.confirmed());
    // The relay's last position report is sent before it stops; the server's walsender takes
    // it in on its own time (a few milliseconds after the relay's connection closed).
    assert!(
        postroom_testkit::wait::eventually(Duration::from_secs(5), async || {
            slot_position(&db.store, &slot).await != before
        })
        .await,
        "the slot advanced"
    );
    // The queue holds the copies with their ids: the consumers' inbox absorbs them.
    let depth: i64 = sqlx::query_scalar("SELECT count(*) FROM postroom_queue")
        .fetch_one(db.store.pool())
        .await
        .unwrap();
    assert_eq!(
        depth as usize,
        first.confirmed().len() + second.confirmed().len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_holds_across_a_failed_publish_in_a_pipelined_window() {
    let db = Logical::start().await;
    let queue = db.queue().await;
    let publisher = Logged::on(&queue);
    let aggregates = ["a", "b", "c", "d", "e", "f"];
    let mut messages = Vec::new();
    for v in 1..=8 {
        for a in aggregates {
            messages.push(order(a, v));
        }
    }
    // Version 3 of `a` is refused once, while batches of other aggregates are in flight.
    let doomed = messages
        .iter()
        .find(|m| m.body_has("\"agg\":\"a\"", 3))
        .unwrap()
        .id;
    *publisher.fail_once.lock().unwrap() = Some(doomed);
    let relay = WalRelay::new(&db.store, publisher.clone(), config("order")).unwrap();
    relay.prepare().await.unwrap();
    for chunk in messages.chunks(6) {
        produce(&db.store, chunk, true).await;
    }
    let running = Running::start(relay);
    all_confirmed(&publisher, &messages, Duration::from_secs(30)).await;
    running.stop().await;
    assert_eq!(
        *publisher.failed.lock().unwrap(),
        vec![doomed],
        "the refusal happened"
    );
    let log = publisher.confirmed();
    assert_aggregate_order(&log);
    // The others went on meanwhile: some message of another aggregate was confirmed after
    // the refusal and before a3's retry was.
    let a3 = log.iter().position(|c| c.id == doomed).unwrap();
    let a2 = log
        .iter()
        .position(|c| c.aggregate == "order:a" && c.version == 2)
        .unwrap();
    assert!(
        log[a2 + 1..a3].iter().any(|c| c.aggregate != "order:a"),
        "other aggregates waited for a's retry"
    );
}

#[test]
#[should_panic(expected = "version 4 confirmed before version 3")]
fn the_order_check_catches_a_successor_confirmed_first() {
    let c = |v| Confirmed {
        id: MessageId::new(),
        aggregate: "order:a".into(),
        version: v,
    };
    assert_aggregate_order(&[c(1), c(2), c(4), c(3)]);
}

/// Which message is `agg` at `version` (the test's bodies carry both).
trait BodyHas {
    fn body_has(&self, agg: &str, version: u64) -> bool;
}

impl BodyHas for OutgoingMessage {
    fn body_has(&self, agg: &str, version: u64) -> bool {
        let body = String::from_utf8_lossy(&self.body);
        body.contains(agg) && body.contains(&format!("\"version\":{version}}}"))
    }
}

/// A broker that confirms at once.
struct Instantly;

#[postroom_core::async_trait]
impl postroom_core::Publisher for Instantly {
    async fn publish(&self, _: &OutgoingMessage) -> postroom_core::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_transaction_over_few_aggregates_is_published_whole() {
    let db = Logical::start().await;
    let publisher = Logged::new(std::sync::Arc::new(Instantly));
    let relay = WalRelay::new(
        &db.store,
        publisher.clone(),
        postroom_postgres::WalRelayConfig {
            batch_size: 100,
            ..config("large")
        },
    )
    .unwrap();
    relay.prepare().await.unwrap();
    let messages: Vec<OutgoingMessage> = (0..5000)
        .map(|i| {
            let mut m = order(&format!("a{}", i % 1000), i / 1000 + 1);
            m.headers.insert("pad".into(), "x".repeat(500));
            m
        })
        .collect();
    let mut tx = db.store.begin().await.unwrap();
    for part in messages.chunks(500) {
        postroom_postgres::outbox::enqueue_batch(&mut tx, db.store.prefix(), part)
            .await
            .unwrap();
    }
    postroom_postgres::commit(tx).await.unwrap();
    let running = Running::start(relay);
    all_confirmed(&publisher, &messages, Duration::from_secs(60)).await;
    running.stop().await;
    assert_aggregate_order(&publisher.confirmed());
}
