//! The relay on the SQLite outbox: messages without an aggregate are unordered, so one relay
//! pass takes as many of them as its batch holds.

use postroom_core::{Envelope, OutboxRelay, OutboxStore, OutgoingMessage, RelayConfig};
use postroom_sqlite::{SqliteStore, outbox};
use std::sync::Arc;

/// Messages built without an aggregate are each their own key: none waits behind another,
/// so a single pass claims and publishes all of them, where one shared key would let a pass
/// take only the head of that key.
#[tokio::test]
async fn one_relay_pass_publishes_every_message_without_an_aggregate() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("o.db")).await.unwrap();
    let queue = store.queue();
    queue.bind("audit", &["note.*"]).await.unwrap();
    let messages: Vec<OutgoingMessage> = (0..5)
        .map(|n| {
            let env = Envelope::builder("note.added", "t")
                .data(serde_json::json!({ "n": n }))
                .build();
            OutgoingMessage::from_envelope(&env, "note.added")
        })
        .collect();
    let mut tx = store.begin().await.unwrap();
    for m in &messages {
        outbox::enqueue(&mut tx, m).await.unwrap();
    }
    tx.commit().await.unwrap();

    let store = Arc::new(store);
    let relay = OutboxRelay::new(
        store.clone(),
        Arc::new(queue),
        RelayConfig {
            relay_id: "r1".into(),
            batch_size: 100,
            ..RelayConfig::default()
        },
    );
    let pass = relay.run_once().await.expect("relay pass");
    assert_eq!(
        (pass.claimed, pass.published),
        (5, 5),
        "one pass takes every message without an aggregate"
    );
    assert_eq!(store.pending().await.unwrap(), 0);
}
