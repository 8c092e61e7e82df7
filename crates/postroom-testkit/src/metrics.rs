//! What a test reads in a `/metrics` page (the Prometheus text exposition).

use std::time::Duration;

/// Wait up to 30 s until the `/metrics` page that `page` reads holds `sample` (failing the test
/// with `what` otherwise), then fail the test unless the page names every metric of `names`.
pub async fn assert_lists_once_sampled(
    page: impl AsyncFn() -> String,
    what: &str,
    sample: &str,
    names: &[&str],
) {
    crate::wait::until(Duration::from_secs(30), what, async || {
        page().await.contains(sample)
    })
    .await;
    let text = page().await;
    for name in names {
        assert!(text.contains(name), "/metrics lacks {name}:\n{text}");
    }
}
