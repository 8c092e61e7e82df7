//! The slot as an operational risk, made visible: every few seconds, each relay of a slot
//! (active or standing by) reads from `pg_replication_slots` how many bytes of log the slot
//! holds back behind the server's current position, and how many more the server may write
//! before it invalidates the slot (when `max_slot_wal_keep_size` bounds it). The active relay
//! adds the age of the oldest commit it read and has not wholly published.

use super::relay::WalRelay;
use postroom_core::Publisher;
use postroom_core::metrics as m;
use sqlx::Row;
use std::time::Duration;
use tokio::sync::watch;

/// How often the slot's lag is read.
pub const LAG_EVERY: Duration = Duration::from_secs(5);

/// Read the slot's lag every [`LAG_EVERY`] until `shutdown`.
pub(super) async fn sample_while<P: Publisher + ?Sized + 'static>(
    relay: &WalRelay<P>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(LAG_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !*shutdown.borrow() {
        tokio::select! {
            _ = tick.tick() => {}
            r = shutdown.changed() => if r.is_err() { break },
        }
        if let Err(e) = sample(relay).await {
            tracing::debug!(slot = %relay.slot, error = %e, "reading the slot's lag failed");
        }
    }
}

async fn sample<P: Publisher + ?Sized + 'static>(relay: &WalRelay<P>) -> Result<(), sqlx::Error> {
    let row = sqlx::query(
        "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::float8 AS lag, safe_wal_size::float8 AS safe
         FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(&relay.slot)
    .fetch_optional(&relay.pool)
    .await?;
    let Some(row) = row else { return Ok(()) };
    if let Some(lag) = row.try_get::<Option<f64>, _>("lag")? {
        metrics::gauge!(m::WAL_SLOT_LAG_BYTES, "slot" => relay.slot.clone()).set(lag.max(0.0));
    }
    if let Some(safe) = row.try_get::<Option<f64>, _>("safe")? {
        metrics::gauge!(m::WAL_SLOT_SAFE_BYTES, "slot" => relay.slot.clone()).set(safe);
    }
    Ok(())
}
