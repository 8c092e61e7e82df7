//! The circuit breaker with its default settings against a database that goes down and comes
//! back (the shared scenario), on RabbitMQ (ack+publish: retries wait in an 8 s TTL stage
//! queue); the handler's database is a PostgreSQL cluster of the test's own, killed with
//! SIGKILL and started again.

mod common;

use common::TestRabbit;
use postroom_testkit::cases::breaker::default_breaker_rides_out_a_database_outage;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_breaker_opens_while_the_database_is_down_and_every_message_is_processed_after() {
    let t = TestRabbit::new("8s").await;
    t.add_consumer("brk", &["order.created"]).await;
    default_breaker_rides_out_a_database_outage(Arc::new(t.transport()), "brk").await;
}
