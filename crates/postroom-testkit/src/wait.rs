//! Waiting in tests for something another task or process makes true: poll a condition
//! until it holds or a bound passes. Tests assert on what happened, never on how long it took;
//! the bound only keeps a broken run from hanging.

use std::time::{Duration, Instant};

/// How often a condition is checked.
const POLL: Duration = Duration::from_millis(25);

/// Poll `cond` until it holds or `bound` passes; whether it held (checked once more at the
/// bound, so a condition that became true meanwhile is not missed).
pub async fn eventually(bound: Duration, mut cond: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(POLL).await;
    }
    cond().await
}

/// [`eventually`] for a condition that reads state at hand (nothing to await).
pub async fn eventually_holds(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    eventually(bound, async || cond()).await
}

/// Poll `cond` until it holds; fail the test, naming `what` was awaited, when `bound` passes.
pub async fn until(bound: Duration, what: &str, cond: impl AsyncFnMut() -> bool) {
    assert!(
        eventually(bound, cond).await,
        "timed out after {bound:?} waiting for {what}"
    );
}
