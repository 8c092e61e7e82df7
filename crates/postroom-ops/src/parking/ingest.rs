//! Moving dead-lettered copies from a transport into the parking store, consumer by
//! consumer, each acked only after its insert commits.

use crate::error::OpsResult;
use postroom_core::parking::ingest::ingest_dead_letters;
use postroom_core::{ParkingStore, Transport};
use std::sync::Arc;
use std::time::Duration;

/// Drain each of `consumers`' dead-letter places until it stays empty for `idle`; returns
/// how many copies each moved.
pub async fn ingest_all(
    transport: &dyn Transport,
    consumers: &[String],
    store: Arc<dyn ParkingStore>,
    idle: Duration,
) -> OpsResult<Vec<(String, u64)>> {
    let mut moved = Vec::with_capacity(consumers.len());
    for c in consumers {
        let n = ingest_dead_letters(transport, c, store.clone(), idle).await?;
        moved.push((c.clone(), n));
    }
    Ok(moved)
}

/// Move every consumer's dead-lettered copies of `pipeline`'s workload into its store until
/// `shutdown` turns true (what `postroom ingest` runs). Where parking writes straight into
/// the store there is nothing to move: it waits for the shutdown all the same, so that a
/// supervisor sees a process that stays up.
pub async fn run_ingest(pipeline: &crate::Pipeline, shutdown: tokio::sync::watch::Receiver<bool>) {
    for task in pipeline.spawn_parking_ingest(&shutdown) {
        let _ = task.await;
    }
    let mut stop = shutdown;
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            break;
        }
    }
}
