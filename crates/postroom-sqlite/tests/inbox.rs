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
