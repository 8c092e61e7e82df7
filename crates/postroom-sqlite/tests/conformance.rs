//! The shared conformance suite on the embedded SQLite default: the embedded queue as the
//! transport, the same file as the store.

use postroom_sqlite::SqliteQueue;
use postroom_testkit::Backend;
use postroom_testkit::stores::sqlite::SqliteFixture;
use std::sync::Arc;
use std::time::Duration;

/// The lease on queue rows, hence how soon a dead consumer's delivery comes back.
const LEASE: Duration = Duration::from_secs(2);

async fn fresh() -> Backend {
    let store = SqliteFixture::fresh().await;
    let queue = store
        .store
        .queue_with(SqliteQueue::defaults().lease(LEASE).prefetch(1))
        .expect("queue");
    Backend::on_own_queue(Arc::new(store), Arc::new(queue), "300ms,600ms", LEASE)
}

postroom_testkit::conformance_suite!(fresh().await);
