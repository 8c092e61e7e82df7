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
