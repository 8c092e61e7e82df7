//! An inbox feed: one consumer's deliveries from the stack's transport stored into the
//! consumer's inbox queue in the store (each acked only after its insert committed),
//! deduplicated by message id. Several feeds, each on its own broker, may fill the same
//! inbox queue at once: that is how the feed moves from one broker to another with the
//! workers behind the table left as they are.

use crate::error::{OpsError, OpsResult};
use postroom::Stack;
use postroom_core::inbox_feed::{FeedCounts, run_feed};
use postroom_core::metrics as m;
use std::time::Duration;
use tokio::sync::watch;

/// How often the feed reads its consumer's backlog on the broker for its lag gauge.
const LAG_EVERY: Duration = Duration::from_secs(2);

/// Feed `consumer`'s inbox queue from `stack`'s transport until `shutdown` turns true.
/// The consumer must be one of the workload's; its routes are its bindings there. The feed
/// is named after the transport in metrics (`feed` label): stored and duplicate counters,
/// and `postroom_inbox_feed_lag_messages` (ready + unacked + delayed on the broker).
pub async fn run_inbox_feed(
    stack: &Stack,
    consumer: &str,
    ordered: bool,
    prefetch: usize,
    shutdown: watch::Receiver<bool>,
) -> OpsResult<FeedCounts> {
    let routes: Vec<String> = stack
        .workload()
        .consumers
        .iter()
        .find(|c| c.name == consumer)
        .map(|c| c.routes.clone())
        .ok_or_else(|| {
            OpsError::usage(format!(
                "the topology has no consumer named {consumer:?} (it has: {})",
                stack.consumers().join(", ")
            ))
        })?;
    let inbox = crate::store_of(stack)?.inbox_feed(consumer, ordered)?;
    let routes: Vec<&str> = routes.iter().map(String::as_str).collect();
    let subscriber = stack.subscribe(consumer, &routes, prefetch).await?;
    let feed = stack.transport().name();
    let lag = {
        let transport = stack.transport().clone();
        let consumer = consumer.to_string();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            while !*stop.borrow() && stop.has_changed().is_ok() {
                match transport.backlog(&consumer).await {
                    Ok(b) => metrics::gauge!(m::INBOX_FEED_LAG, "consumer" => consumer.clone(), "feed" => feed)
                        .set((b.ready + b.unacked + b.delayed) as f64),
                    Err(e) => tracing::debug!(error = %e, "inbox feed: cannot read the backlog"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(LAG_EVERY) => {}
                    _ = stop.changed() => {}
                }
            }
        })
    };
    let counts = run_feed(
        inbox.as_ref(),
        feed,
        subscriber,
        Duration::from_millis(100),
        shutdown,
    )
    .await;
    lag.abort();
    Ok(counts)
}
