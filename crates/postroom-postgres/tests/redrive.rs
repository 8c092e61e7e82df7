//! Redrive against the races an operator cannot see: a redriven copy consumed and parked again
//! before the redrive records it, a message already applied, a message older than the inbox's
//! replay window. PostgreSQL parking lot and inbox, `PgQueue` as the transport; the cases are
//! [`postroom_testkit::cases::table_queue_redrive`].

use postroom_testkit::cases::table_queue_redrive as case;
use postroom_testkit::stores::postgres::PgFixture;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_parked_again_before_the_redrive_mark_stays_visible() {
    case::a_copy_parked_again_before_the_redrive_mark_stays_visible(&PgFixture::fresh(8).await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_skips_and_reports_a_message_its_consumer_already_applied() {
    case::redrive_skips_and_reports_a_message_its_consumer_already_applied(
        &PgFixture::fresh(8).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_refuses_a_message_older_than_the_replay_window_unless_forced() {
    case::redrive_refuses_a_message_older_than_the_replay_window_unless_forced(
        &PgFixture::fresh(8).await,
    )
    .await;
}
