//! The inbox, the same on every store: many lookups at once answer what one lookup at a time
//! answers; and the replay window: purging forgets only ids processed before the window, so a
//! copy arriving within it is still absorbed and one arriving after it is applied again (the
//! reason the window must outlast every redelivery, retry, redrive and replay).

use postroom_core::{InboxLookup, MessageId};
use std::time::Duration;

/// Ask `inbox` about every pair of `items` at once and then one pair at a time; fail the test
/// unless the answers agree. The answers, in the order of `items`.
pub async fn contains_each_as_one_at_a_time(
    inbox: &impl InboxLookup,
    items: &[(&str, MessageId)],
) -> Vec<bool> {
    let many = inbox.contains_each(items).await.unwrap();
    let mut one_by_one = Vec::new();
    for (c, id) in items {
        one_by_one.push(inbox.contains(c, *id).await.unwrap());
    }
    assert_eq!(many, one_by_one);
    many
}

/// A store's inbox, as the replay-window case drives it.
pub trait PurgeableInbox: InboxLookup {
    /// In one transaction: claim the inbox row `(consumer, id)`; commit. Whether it was new.
    fn claim(&self, consumer: &str, id: MessageId) -> impl Future<Output = bool>;

    /// Move the time `id` was processed (for every consumer) `by` into the past.
    fn backdate(&self, id: MessageId, by: Duration) -> impl Future<Output = ()>;

    /// Forget the ids processed before `window`; how many rows went.
    fn purge(&self, window: Duration) -> impl Future<Output = u64>;
}

/// Of two ids claimed by `inv`, the one processed two hours ago is forgotten by a purge with
/// a one-hour window and the other kept: a copy of the recent one is still a duplicate, a
/// copy of the old one is new again.
pub async fn purge_forgets_only_ids_older_than_the_window(store: &impl PurgeableInbox) {
    let (old, recent) = (MessageId::new(), MessageId::new());
    assert!(store.claim("inv", old).await);
    assert!(store.claim("inv", recent).await);
    store.backdate(old, Duration::from_secs(2 * 3600)).await;

    let purged = store.purge(Duration::from_secs(3600)).await;
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
        !store.claim("inv", recent).await,
        "a copy within the window is still a duplicate"
    );
    assert!(
        store.claim("inv", old).await,
        "a copy after the window is new again"
    );
}

#[cfg(feature = "postgres")]
impl PurgeableInbox for postroom_postgres::PgStore {
    async fn claim(&self, consumer: &str, id: MessageId) -> bool {
        let mut tx = self.begin().await.unwrap();
        let new = postroom_postgres::inbox::claim(&mut tx, self.prefix(), consumer, id)
            .await
            .unwrap();
        postroom_postgres::commit(tx).await.unwrap();
        new
    }

    async fn backdate(&self, id: MessageId, by: Duration) {
        sqlx::query(&format!(
            "UPDATE {} SET processed_at = processed_at - make_interval(secs => $2) WHERE message_id = $1",
            self.prefix().table("inbox")
        ))
        .bind(id.as_uuid())
        .bind(by.as_secs_f64())
        .execute(self.pool())
        .await
        .unwrap();
    }

    async fn purge(&self, window: Duration) -> u64 {
        postroom_postgres::inbox::purge(self.pool(), self.prefix(), window)
            .await
            .unwrap()
    }
}

#[cfg(feature = "sqlite")]
impl PurgeableInbox for postroom_sqlite::SqliteStore {
    async fn claim(&self, consumer: &str, id: MessageId) -> bool {
        let mut tx = self.begin().await.unwrap();
        let new = postroom_sqlite::inbox::claim(&mut tx, consumer, id)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        new
    }

    async fn backdate(&self, id: MessageId, by: Duration) {
        // `processed_at` is in milliseconds since the epoch.
        sqlx::query(
            "UPDATE postroom_inbox SET processed_at = processed_at - ? WHERE message_id = ?",
        )
        .bind(i64::try_from(by.as_millis()).unwrap())
        .bind(id.to_string())
        .execute(self.pool())
        .await
        .unwrap();
    }

    async fn purge(&self, window: Duration) -> u64 {
        self.purge_inbox(window).await.unwrap()
    }
}
