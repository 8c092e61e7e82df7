//! The inbox's replay window: `purge_inbox` forgets only ids older than the window, so a copy
//! arriving within the window is still absorbed and one arriving after it is applied again
//! (the reason the window must outlast every redelivery, retry, redrive and replay).

use postroom_core::{InboxLookup, MessageId};
use postroom_sqlite::{SqliteStore, inbox};
use postroom_testkit::cases;
use std::time::Duration;

#[tokio::test]
async fn purge_inbox_forgets_only_ids_older_than_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("i.db")).await.unwrap();
    cases::inbox::purge_forgets_only_ids_older_than_the_window(&store).await;
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
    let many = cases::inbox::contains_each_as_one_at_a_time(&store, &items).await;
    let held = many.iter().filter(|h| **h).count();
    // Even positions ask `inv` (multiples of 3 among them: every sixth id), odd ones `mail`
    // (odd multiples of 5), then `inv` again for id 0.
    let want =
        (0..2_500).filter(|k| k % 6 == 0).count() + (0..2_500).filter(|k| k % 10 == 5).count() + 1;
    assert_eq!(held, want);
    assert!(store.contains_each(&[]).await.unwrap().is_empty());
}
