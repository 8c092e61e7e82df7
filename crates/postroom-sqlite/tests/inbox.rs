//! The inbox's replay window: `purge_inbox` forgets only ids older than the window, so a copy
//! arriving within the window is still absorbed and one arriving after it is applied again
//! (the reason the window must outlast every redelivery, retry, redrive and replay).

use postroom_core::{InboxLookup, MessageId};
use postroom_sqlite::{SqliteStore, inbox};
use std::time::Duration;

async fn claim(store: &SqliteStore, consumer: &str, id: MessageId) -> bool {
    let mut tx = store.begin().await.unwrap();
    let new = inbox::claim(&mut tx, consumer, id).await.unwrap();
    tx.commit().await.unwrap();
    new
}

#[tokio::test]
async fn purge_inbox_forgets_only_ids_older_than_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("i.db")).await.unwrap();
    let (old, recent) = (MessageId::new(), MessageId::new());
    assert!(claim(&store, "inv", old).await);
    assert!(claim(&store, "inv", recent).await);
    // The old id was processed two hours ago.
    sqlx::query("UPDATE postroom_inbox SET processed_at = processed_at - ? WHERE message_id = ?")
        .bind(2 * 3600 * 1000_i64)
        .bind(old.to_string())
        .execute(store.pool())
        .await
        .unwrap();

    let purged = store.purge_inbox(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(purged, 1, "only the id older than the one-hour window");
    assert!(
        !store.contains("inv", old).await.unwrap(),
        "the old id is forgotten"
    );
    assert!(
        store.contains("inv", recent).await.unwrap(),
        "the recent id is kept"
    );
    assert!(
        !claim(&store, "inv", recent).await,
        "a copy within the window is still a duplicate"
    );
    assert!(
        claim(&store, "inv", old).await,
        "a copy after the window is new again"
    );
    assert_eq!(
        store.purge_inbox(Duration::from_secs(3600)).await.unwrap(),
        0,
        "nothing else is old enough"
    );
}

/// Many lookups at once answer exactly what one lookup at a time answers, in order, across
/// more pairs than one statement takes, with consumers told apart and repeated pairs kept.
#[tokio::test]
async fn many_lookups_at_once_agree_with_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("i.db")).await.unwrap();
    let ids: Vec<MessageId> = (0..2_500).map(|_| MessageId::new()).collect();
    // Every third id applied by `inv`, every fifth by `mail`.
    let applied_by = |c: usize| -> Vec<MessageId> { ids.iter().copied().step_by(c).collect() };
    let mut tx = store.begin().await.unwrap();
    inbox::claim_many(&mut tx, "inv", &applied_by(3))
        .await
        .unwrap();
    inbox::claim_many(&mut tx, "mail", &applied_by(5))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let mut items: Vec<(&str, MessageId)> = Vec::new();
    for (k, id) in ids.iter().enumerate() {
        items.push((if k % 2 == 0 { "inv" } else { "mail" }, *id));
    }
    items.push(("inv", ids[0]));
    items.push(("nobody", ids[0]));
    let many = store.contains_each(&items).await.unwrap();
    let mut one_by_one = Vec::new();
    for (c, id) in &items {
        one_by_one.push(store.contains(c, *id).await.unwrap());
    }
    assert_eq!(many, one_by_one);
    let held = many.iter().filter(|h| **h).count();
    // Even positions ask `inv` (multiples of 3 among them: every sixth id), odd ones `mail`
    // (odd multiples of 5), then `inv` again for id 0.
    let want =
        (0..2_500).filter(|k| k % 6 == 0).count() + (0..2_500).filter(|k| k % 10 == 5).count() + 1;
    assert_eq!(held, want);
    assert!(store.contains_each(&[]).await.unwrap().is_empty());
}
