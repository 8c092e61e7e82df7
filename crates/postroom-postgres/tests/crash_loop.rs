//! The table queue's lease against a consumer that dies: a handler slower than its lease is
//! refused when the consumer is built, and a message that kills its consumer on every
//! delivery is parked as a crash loop once its delivery count reaches the bound. The cases
//! are [`postroom_testkit::cases::crash_loop`]; its consumer processes are this test binary.

use postroom_testkit::cases::crash_loop as case;
use postroom_testkit::stores::postgres::PgFixture;

#[tokio::test]
async fn a_handler_slower_than_its_lease_is_refused_at_start_up() {
    case::a_handler_slower_than_its_lease_is_refused_at_start_up(&PgFixture::fresh(2).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop() {
    case::a_message_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop(PgFixture::fresh(
        4,
    ))
    .await;
}
