//! Redrive against the races an operator cannot see: a redriven copy consumed and parked again
//! before the redrive records it, a message already applied. The SQLite parking lot and inbox,
//! the embedded queue as the transport; the cases are
//! [`postroom_testkit::cases::table_queue_redrive`].

use postroom_testkit::cases::table_queue_redrive as case;
use postroom_testkit::stores::sqlite::SqliteFixture;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_parked_again_before_the_redrive_mark_stays_visible() {
    case::a_copy_parked_again_before_the_redrive_mark_stays_visible(&SqliteFixture::fresh().await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_skips_and_reports_a_message_its_consumer_already_applied() {
    case::redrive_skips_and_reports_a_message_its_consumer_already_applied(
        &SqliteFixture::fresh().await,
    )
    .await;
}
