//! # postroom-testkit
//!
//! The one conformance suite every store and transport passes, against real servers.
//! A backend is a store half ([`StoreFixture`]; ready ones in [`stores`]) and a transport
//! half ([`TransportFixture`]: any [`Transport`](postroom_core::Transport)); a test file calls
//! [`conformance_suite!`](crate::conformance_suite) with an expression that builds a fresh,
//! isolated [`Backend`] (random database, queue names or file). Each case becomes its own
//! test.
//!
//! ```text
//! postroom_testkit::conformance_suite!(Backend::new(
//!     Arc::new(SqliteFixture::fresh().await),
//!     TransportFixture { transport, ladder, redelivery_after, prefetch: 1 },
//! ));
//! ```

pub mod cases;
pub mod child;
pub mod effect;
pub mod effects_table;
pub mod fixture;
pub mod metrics;
pub mod probe;
pub mod recording;
pub mod running;
pub mod servers;
pub mod stores;
pub mod table_queue;
pub mod wait;
pub mod watched;

pub use effect::{EffectHandler, Fault};
pub use fixture::{Backend, BackendCaps, StoreFixture, TransportFixture};
pub use table_queue::TableQueueFixture;

/// Expand to one `#[tokio::test]` per conformance case, each with a fresh backend built by
/// `$make` (an async expression evaluating to a `Backend`).
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            dedup_absorbs_duplicate_delivery,
            ack_only_after_commit,
            retry_ladder_never_earlier_than_stage,
            max_attempts_then_park,
            max_age_parks,
            permanent_error_parks_at_once,
            corrupt_body_parks_at_once,
            redrive_by_criterion_at_rate,
            redrive_resumes_after_interruption,
            relay_crash_between_publish_and_mark,
            relay_keeps_aggregate_order,
            relay_loops_keep_aggregate_order,
            relay_sends_new_rows_while_a_batch_awaits_its_confirms,
            business_outcome_is_acked,
            handler_timeout_retries_as_transient,
            unknown_error_bounded_then_parked,
            batch_isolates_a_poison_message,
            batch_retries_only_the_failing_message,
            batch_crash_after_commit_before_ack,
            foreign_messages_are_deduplicated_retried_and_parked,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend = ::std::sync::Arc::new($make);
                $crate::cases::$case(&backend).await;
            }
        )*
    };
}
