//! The circuit breaker with its default settings against a database that goes down and comes
//! back (the shared scenario), on the `PgQueue` of the shared server; the handler's database
//! is a PostgreSQL cluster of the test's own, killed with SIGKILL and started again.

mod common;

use common::fresh_store;
use postroom_postgres::PgQueue;
use postroom_testkit::cases::breaker::default_breaker_rides_out_a_database_outage;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_breaker_opens_while_the_database_is_down_and_every_message_is_processed_after() {
    let (store, _queue_db) = fresh_store(8).await;
    let queue = store
        .queue(PgQueue::defaults().poll_interval(Duration::from_millis(50)))
        .unwrap();
    default_breaker_rides_out_a_database_outage(Arc::new(queue), "brk").await;
}
