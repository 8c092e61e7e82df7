//! The parking ingest: read a consumer's dead-letter place (any [`Subscriber`]: a parking
//! queue, topic or stream, a DLQ) and write each copy into a [`ParkingStore`], acknowledging
//! it only after the insert returned. The store is the operator's view; the dead-letter place
//! is the durable hand-over. A store that is down leaves the copies where they are.

use super::ParkingStore;
use super::codec::from_headers;
use crate::backoff::Backoff;
use crate::error::Result;
use crate::metrics as m;
use crate::transport::{Delivery, Subscriber, Transport};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Moves one consumer's dead-lettered copies into a parking store.
pub struct ParkingIngest<S: ?Sized> {
    consumer: String,
    store: Arc<S>,
}

impl<S: ParkingStore + ?Sized> ParkingIngest<S> {
    /// An ingest for `consumer`, writing into `store`.
    pub fn new(consumer: impl Into<String>, store: Arc<S>) -> Self {
        Self {
            consumer: consumer.into(),
            store,
        }
    }

    /// Store and acknowledge copies from `sub` until none arrives for `idle` (or `shutdown`
    /// turns true); returns how many were stored. A failed insert or ack ends it with the
    /// error: the copy stays with the transport.
    pub async fn drain<Sub: Subscriber>(
        &self,
        sub: &mut Sub,
        idle: Duration,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<u64> {
        let mut stored = 0;
        let poll = idle.min(Duration::from_millis(500));
        let mut quiet = Duration::ZERO;
        // The receive is never cancelled halfway; shutdown is checked between receives.
        while !*shutdown.borrow() && shutdown.has_changed().is_ok() {
            let Some(delivery) = sub.next(poll).await? else {
                quiet += poll;
                if quiet >= idle {
                    break;
                }
                continue;
            };
            quiet = Duration::ZERO;
            let msg = delivery.message();
            let record = from_headers(
                &self.consumer,
                msg.id,
                &msg.routing_key,
                &msg.headers,
                &msg.body,
            );
            // Store first; a failure leaves the copy unacknowledged with the transport.
            self.store.park(&record).await?;
            delivery.ack().await.map_err(|(e, _back)| e)?;
            metrics::counter!(m::PARKING_INGESTED, "consumer" => record.consumer.clone())
                .increment(1);
            tracing::info!(message_id = %record.message_id, code = %record.error_code, "parked message stored");
            stored += 1;
        }
        Ok(stored)
    }

    /// Ingest from `transport`'s dead-letter place of this consumer until `shutdown` turns
    /// true, subscribing again with a bounded backoff after a failure. Returns at once when
    /// the transport parks straight into the store (it has no dead-letter place).
    pub async fn run(&self, transport: &dyn Transport, shutdown: watch::Receiver<bool>) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        let mut shutdown = shutdown;
        // A dropped sender counts as shutdown too.
        while !*shutdown.borrow() && shutdown.has_changed().is_ok() {
            let failure = match transport.dead_letters(&self.consumer).await {
                Ok(None) => return,
                Ok(Some(mut sub)) => {
                    let r = self.drain(&mut sub, Duration::MAX, &shutdown).await;
                    sub.close().await;
                    match r {
                        Ok(_) => {
                            backoff.reset();
                            None
                        }
                        Err(e) => Some(e),
                    }
                }
                Err(e) => Some(e),
            };
            if let Some(e) = failure {
                let d = backoff.next_delay();
                tracing::warn!(consumer = %self.consumer, error = %e, retry_in_ms = d.as_millis() as u64, "parking ingest failed");
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }
}

/// Drain `consumer`'s dead-letter place on `transport` into `store` until it stays empty for
/// `idle`; returns how many copies were stored (0 when the transport parks straight into the
/// store). What a command calls before listing the parking lot.
pub async fn ingest_dead_letters<S: ParkingStore + ?Sized>(
    transport: &dyn Transport,
    consumer: &str,
    store: Arc<S>,
    idle: Duration,
) -> Result<u64> {
    let Some(mut sub) = transport.dead_letters(consumer).await? else {
        return Ok(0);
    };
    let (_keep, shutdown) = watch::channel(false);
    let r = ParkingIngest::new(consumer, store)
        .drain(&mut sub, idle, &shutdown)
        .await;
    sub.close().await;
    r
}
