//! The shared conformance suite on the embedded SQLite default: the embedded queue as the
//! transport, the same file as the store.

use postroom_sqlite::SqliteQueue;
use postroom_testkit::stores::sqlite::SqliteFixture;
use postroom_testkit::{Backend, TransportFixture};
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
    Backend::new(
        Arc::new(store),
        TransportFixture {
            transport: Arc::new(queue),
            ladder: "300ms,600ms".parse().unwrap(),
            redelivery_after: LEASE,
            prefetch: 1,
        },
    )
}

postroom_testkit::conformance_suite!(fresh().await);
