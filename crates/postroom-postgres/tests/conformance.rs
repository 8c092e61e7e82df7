//! The shared conformance suite, unchanged, against a real PostgreSQL: the outbox, inbox and
//! parking lot of this crate with `PgQueue` as the transport. Each test gets its own database.

use postroom_postgres::PgQueue;
use postroom_testkit::Backend;
use postroom_testkit::stores::postgres::PgFixture;
use std::sync::Arc;
use std::time::Duration;

/// The lease on queue rows, hence how soon a dead consumer's delivery comes back.
const LEASE: Duration = Duration::from_secs(2);

async fn fresh() -> Backend {
    on(PgFixture::fresh(8).await)
}

fn on(store: PgFixture) -> Backend {
    let queue = store
        .store
        .queue(
            PgQueue::defaults()
                .lease(LEASE)
                .poll_interval(Duration::from_millis(20)),
        )
        .expect("queue");
    Backend::on_own_queue(Arc::new(store), Arc::new(queue), "500ms,1s", LEASE)
}

postroom_testkit::conformance_suite!(fresh().await);

/// The relay cases again with an outbox that deletes each row once its publish is
/// confirmed, instead of marking it: the same crash, order and many-relay guarantees.
mod deleting_outbox {
    use super::on;
    use postroom_testkit::stores::postgres::PgFixture;

    postroom_testkit::conformance_suite!(@cases on(PgFixture::fresh(8).await.deleting_published());
        relay_crash_between_publish_and_mark,
        relay_keeps_aggregate_order,
        relay_loops_keep_aggregate_order,
        relay_sends_new_rows_while_a_batch_awaits_its_confirms,
    );
}
