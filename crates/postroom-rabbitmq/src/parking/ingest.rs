//! Parking ingest: consume `<consumer>.parking` and write each message into a
//! [`ParkingStore`], acking only after the insert returned. This is what makes
//! `parking list | show | redrive` work for RabbitMQ: the store is the operator's view, the
//! queue the durable hand-over.

use super::record::from_message;
use crate::error::amqp;
use crate::{Broker, ConsumerNames};
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use postroom_core::backoff::Backoff;
use postroom_core::{ParkingStore, Result};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Moves parked messages of one consumer from its parking queue into a store.
pub struct ParkingIngest<S: ?Sized> {
    broker: Arc<Broker>,
    names: ConsumerNames,
    store: Arc<S>,
    prefetch: u16,
}

impl<S: ParkingStore + ?Sized> ParkingIngest<S> {
    /// An ingest for the consumer named by `names`, writing into `store`.
    pub fn new(broker: Arc<Broker>, names: ConsumerNames, store: Arc<S>) -> Self {
        Self {
            broker,
            names,
            store,
            prefetch: 32,
        }
    }

    /// Ingest until no message arrives for `idle`; returns how many were stored.
    pub async fn drain(&self, idle: Duration) -> Result<u64> {
        let (_tx, rx) = watch::channel(false);
        self.consume(Some(idle), rx).await
    }

    /// Ingest until `shutdown` turns true, re-opening the channel with a bounded backoff
    /// after failures (a store that is down leaves the messages in the queue).
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        // A dropped sender counts as shutdown too.
        while !*shutdown.borrow() && shutdown.has_changed().is_ok() {
            match self.consume(None, shutdown.clone()).await {
                Ok(_) => backoff.reset(),
                Err(e) => {
                    let d = backoff.next_delay();
                    tracing::warn!(error = %e, queue = %self.names.parking_queue, retry_in_ms = d.as_millis() as u64, "parking ingest failed");
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = shutdown.changed() => {}
                    }
                }
            }
        }
    }

    async fn consume(
        &self,
        idle: Option<Duration>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<u64> {
        let ch = self.broker.channel().await?;
        ch.basic_qos(self.prefetch, BasicQosOptions::default())
            .await
            .map_err(|e| amqp("setting prefetch", e))?;
        let mut consumer = ch
            .basic_consume(
                &self.names.parking_queue,
                "",
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| amqp(format!("consuming {}", self.names.parking_queue), e))?;
        let mut stored = 0;
        loop {
            let wait = idle.unwrap_or(Duration::from_secs(3600));
            let next = tokio::select! {
                n = tokio::time::timeout(wait, consumer.next()) => n,
                _ = shutdown.changed() => break,
            };
            let delivery = match next {
                Err(_) if idle.is_some() => break,
                Err(_) => continue,
                Ok(None) => {
                    return Err(postroom_core::Error::new(
                        postroom_core::ErrorKind::Closed,
                        "parking consumer cancelled",
                    ));
                }
                Ok(Some(Err(e))) => return Err(amqp("consuming the parking queue", e)),
                Ok(Some(Ok(d))) => d,
            };
            let record = from_message(
                &self.names.consumer,
                &delivery.properties,
                delivery.routing_key.as_str(),
                &delivery.data,
            );
            // Store first; a failure leaves the message unacked and the channel is dropped,
            // so the broker keeps it for the next attempt.
            self.store.park(&record).await?;
            delivery
                .acker
                .ack(BasicAckOptions::default())
                .await
                .map_err(|e| amqp("acking a parked message", e))?;
            tracing::info!(message_id = %record.message_id, code = %record.error_code, "parked message stored");
            stored += 1;
        }
        let _ = ch.close(200, "parking ingest done").await;
        Ok(stored)
    }
}

/// Drain `names`'s parking queue into `store` until it stays empty for `idle`; returns how
/// many messages were stored. The function a CLI calls before `parking list`.
pub async fn ingest_parking<S: ParkingStore + ?Sized>(
    broker: Arc<Broker>,
    names: ConsumerNames,
    store: Arc<S>,
    idle: Duration,
) -> Result<u64> {
    ParkingIngest::new(broker, names, store).drain(idle).await
}
