//! # postroom-testkit
//!
//! The one conformance suite every store and transport passes, against real servers.
//! A backend implements [`Backend`]; its test file then calls
//! [`conformance_suite!`](crate::conformance_suite) with an expression that builds a fresh,
//! isolated backend (random database, queue names or file). Each case becomes its own test.
//!
//! ```text
//! postroom_testkit::conformance_suite!(my_backend::fresh().await);
//! ```

pub mod backend;
pub mod cases;
pub mod effect;

pub use backend::{Backend, BackendCaps};
pub use effect::{EffectHandler, Fault};

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
            business_outcome_is_acked,
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
