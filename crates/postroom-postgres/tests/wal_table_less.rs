//! The table-less producer: messages written into the log alone, in the business
//! transaction, published by the WAL relay once committed and never when rolled back; refused
//! where the slot would not be a safe only copy.

mod wal_common;

use postroom_core::{ErrorKind, OutgoingMessage};
use postroom_postgres::wal::{TableLessProducer, WalRelay, WalRelayConfig};
use std::time::Duration;
use wal_common::*;

async fn emit(
    producer: &TableLessProducer,
    db: &Logical,
    messages: &[OutgoingMessage],
    commit_it: bool,
) {
    let mut tx = db.store.begin().await.unwrap();
    for m in messages {
        producer.emit(&mut tx, m).await.unwrap();
    }
    if commit_it {
        postroom_postgres::commit(tx).await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_messages_are_published_rolled_back_ones_never_and_no_row_is_written() {
    let db = Logical::start().await;
    let slot = "postroom_outbox_wal";
    let refused = TableLessProducer::new(db.store.pool(), prefix(), slot)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Config);
    assert!(refused.to_string().contains("does not exist"), "{refused}");
    let queue = db.queue().await;
    let publisher = Logged::on(&queue);
    let cfg = WalRelayConfig {
        table_less: true,
        ..config("tableless")
    };
    let relay = WalRelay::new(&db.store, publisher.clone(), cfg).unwrap();
    relay.prepare().await.unwrap();
    let producer = TableLessProducer::new(db.store.pool(), prefix(), slot)
        .await
        .unwrap();
    let running = Running::start(relay);
    let committed: Vec<OutgoingMessage> = (1..=4).map(|v| order("t", v)).collect();
    let rolled_back: Vec<OutgoingMessage> = (1..=2).map(|v| order("r", v)).collect();
    emit(&producer, &db, &committed[..2], true).await;
    emit(&producer, &db, &rolled_back, false).await;
    emit(&producer, &db, &committed[2..], true).await;
    // Rows and messages mix: an outbox row after them is published after them.
    let row = [order("t", 5)];
    produce(&db.store, &row, true).await;
    all_confirmed(&publisher, &row, Duration::from_secs(20)).await;
    running.stop().await;
    let mut expected = committed.clone();
    expected.extend(row);
    assert_published_exactly(&expected, &publisher.ids());
    assert_aggregate_order(&publisher.confirmed());
    let got = publisher.confirmed();
    let first = got.iter().find(|c| c.id == committed[0].id).unwrap();
    assert_eq!(first.aggregate, "order:t");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM postroom_outbox")
        .fetch_one(db.store.pool())
        .await
        .unwrap();
    assert_eq!(
        rows, 1,
        "only the one outbox row: the table-less messages wrote none"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_where_the_server_may_remove_log_the_slot_needs() {
    let db = Logical::start_with(&[("max_slot_wal_keep_size", "64MB")]).await;
    let queue = db.queue().await;
    let relay = WalRelay::new(&db.store, Logged::on(&queue), config("plain")).unwrap();
    relay.prepare().await.unwrap();
    let e = TableLessProducer::new(db.store.pool(), prefix(), relay.slot())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("max_slot_wal_keep_size") && e.contains("-1"),
        "{e}"
    );
    let cfg = WalRelayConfig {
        table_less: true,
        ..config("tableless")
    };
    let relay = WalRelay::new(&db.store, Logged::on(&queue), cfg).unwrap();
    let e = relay.prepare().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
}
