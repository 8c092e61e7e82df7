//! [`WalRelay`]: the relay that reads the outbox from a logical replication slot. Outwardly
//! it is core's `OutboxRelay`: built from its source (the store), a publisher and a config,
//! and run until a shutdown signal.

use super::lsn::Lsn;
use super::slot::{self, Prepared};
use super::wire::Target;
use crate::{PgStore, TablePrefix};
use postroom_core::metrics as m;
use postroom_core::{Publisher, Result};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// WAL relay settings.
#[derive(Clone, Debug)]
pub struct WalRelayConfig {
    /// This relay's name (in logs and metric labels).
    pub relay_id: String,
    /// The replication slot; `None`: `{prefix}outbox_wal`. One active relay reads a slot;
    /// relays started on the same slot stand by and take over when it goes.
    pub slot: Option<String>,
    /// The publication of the outbox's inserts; `None`: `{prefix}outbox_wal`.
    pub publication: Option<String>,
    /// Most messages in one publish batch (heads of distinct aggregates).
    pub batch_size: usize,
    /// Batches in flight at once (the broker's window is `batch_size × batches_in_flight`).
    pub batches_in_flight: usize,
    /// Most messages read from the slot and not yet confirmed; past it the relay stops
    /// reading (the server waits) until confirms come in. Bounds the relay's memory while a
    /// broker is down.
    pub max_held: usize,
    /// Delay before a message whose publish failed is tried again (doubled per failure, up
    /// to 64 times).
    pub retry_after: Duration,
    /// How often a standing-by relay tries to take the slot over.
    pub standby_poll: Duration,
    /// Outbox rows the slot has passed are deleted in bulk once older than this; `None`
    /// keeps them.
    pub retention: Option<Duration>,
    /// Producers also write table-less messages (`TableLessProducer`): the relay refuses to
    /// start where that cannot be made safe (see `table_less`).
    pub table_less: bool,
}

impl Default for WalRelayConfig {
    fn default() -> Self {
        Self {
            relay_id: format!("wal-relay-{}", std::process::id()),
            slot: None,
            publication: None,
            batch_size: 100,
            batches_in_flight: 8,
            max_held: 20_000,
            retry_after: Duration::from_secs(1),
            standby_poll: Duration::from_secs(1),
            retention: Some(Duration::from_secs(24 * 3600)),
            table_less: false,
        }
    }
}

/// The longest a takeover takes after the active relay's process died, with the default
/// [`WalRelayConfig::standby_poll`] of 1 s: a standby tries the slot every poll, and the server
/// releases a dead reader's slot as soon as its connection closes (at once when the process
/// dies; after `wal_sender_timeout`, 60 s by default, when its host vanishes from the network
/// instead). Measured here well under it (the takeover test asserts it).
pub const TAKEOVER_AFTER_CRASH: Duration = Duration::from_secs(5);

/// The relay (see the module documentation of [`crate::wal`]).
pub struct WalRelay<P: ?Sized> {
    pub(super) pool: PgPool,
    pub(super) prefix: TablePrefix,
    pub(super) target: Target,
    pub(super) publisher: Arc<P>,
    pub(super) config: WalRelayConfig,
    pub(super) slot: String,
    pub(super) publication: String,
    /// The stream's word to the timer that publishes scheduled rows (see `scheduled`).
    pub(super) scheduled: Arc<super::scheduled::ScheduledSignal>,
}

/// A slot or publication name: lower-case letters, digits and `_`, at most 63 characters.
fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(postroom_core::Error::new(
            postroom_core::ErrorKind::Config,
            format!("{what} {name:?}: use lower-case letters, digits and _ (at most 63)"),
        ))
    }
}

impl<P: Publisher + ?Sized + 'static> WalRelay<P> {
    /// A relay over `store`'s outbox publishing with `publisher`. The replication connection
    /// goes to the server of `store`'s pool, as its user, with its TLS settings.
    pub fn new(store: &PgStore, publisher: Arc<P>, config: WalRelayConfig) -> Result<Self> {
        let prefix = store.prefix().clone();
        let default = format!("{prefix}outbox_wal");
        let slot = config.slot.clone().unwrap_or_else(|| default.clone());
        let publication = config.publication.clone().unwrap_or(default);
        check_name("slot", &slot)?;
        check_name("publication", &publication)?;
        if config.batch_size == 0 || config.batches_in_flight == 0 || config.max_held == 0 {
            return Err(postroom_core::Error::new(
                postroom_core::ErrorKind::Config,
                "the WAL relay's batch size, batches in flight and held messages must be at least 1",
            ));
        }
        Ok(Self {
            pool: store.pool().clone(),
            prefix,
            target: Target::of(&store.pool().connect_options()),
            publisher,
            config,
            slot,
            publication,
            scheduled: Arc::default(),
        })
    }

    /// The slot this relay reads.
    pub fn slot(&self) -> &str {
        &self.slot
    }

    /// Check and create what the relay needs (logical decoding, the publication, the slot);
    /// an error says what is missing and how to get it, or, for a slot that was invalidated
    /// or dropped, the way back ([`recreate_slot`](Self::recreate_slot)).
    pub async fn prepare(&self) -> Result<()> {
        self.prepared().await.map(|_| ())
    }

    pub(super) async fn prepared(&self) -> Result<Prepared> {
        let p = slot::prepare(&self.pool, &self.prefix, &self.slot, &self.publication).await?;
        if self.config.table_less {
            super::table_less::check_safe(&self.pool, &self.slot).await?;
        }
        Ok(p)
    }

    /// Run until `shutdown` turns true: read the slot while no other relay does, stand by
    /// while one does. Errors are logged and retried with a bounded backoff (a slot that
    /// needs a person's hand is logged as an error, with the way back, at each try); they
    /// never end the loop. On shutdown the batches in flight are waited for and the slot's
    /// position is advanced past what they confirmed.
    ///
    /// Scheduled rows are not published from the log (it hands them over at their commit,
    /// before their time): beside the stream, a timer claims them once they fall due and
    /// marks them published, on every relay of the slot (see `scheduled`).
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) {
        let mut backoff = postroom_core::backoff::Backoff::new(
            Duration::from_millis(200),
            Duration::from_secs(15),
        );
        let mut standing_by = false;
        let sampler = super::lag::sample_while(self, shutdown.clone());
        let due_rows = Arc::new(super::scheduled::DueRows::new(
            self.pool.clone(),
            &self.prefix,
            self.scheduled.clone(),
        ));
        let timer = postroom_core::OutboxRelay::new(
            due_rows,
            self.publisher.clone(),
            postroom_core::RelayConfig {
                relay_id: format!("{}-scheduled", self.config.relay_id),
                batch_size: self.config.batch_size,
                retry_after: self.config.retry_after,
                retention: self.config.retention,
                idle_wait: self.config.standby_poll,
                ..postroom_core::RelayConfig::default()
            },
        );
        let timer = timer.run(shutdown.clone());
        let main = async {
            while !*shutdown.borrow() && shutdown.has_changed().is_ok() {
                let pause = match self.stream(&mut shutdown).await {
                    Ok(()) => {
                        backoff.reset();
                        continue;
                    }
                    Err(super::pump::Ended::Standby) => {
                        if !standing_by {
                            tracing::info!(relay = %self.config.relay_id, slot = %self.slot, "another relay reads the slot: standing by");
                        }
                        standing_by = true;
                        self.active(false);
                        self.config.standby_poll
                    }
                    Err(super::pump::Ended::Failed(e)) => {
                        standing_by = false;
                        self.active(false);
                        let d = backoff.next_delay();
                        if e.kind() == postroom_core::ErrorKind::Config {
                            tracing::error!(relay = %self.config.relay_id, slot = %self.slot, error = %e, retry_in_ms = d.as_millis() as u64, "the WAL relay cannot run");
                        } else {
                            tracing::warn!(relay = %self.config.relay_id, slot = %self.slot, error = %e, retry_in_ms = d.as_millis() as u64, "the WAL relay's stream failed");
                        }
                        d
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = shutdown.changed() => {}
                }
            }
        };
        tokio::join!(main, sampler, timer);
        self.active(false);
    }

    pub(super) fn active(&self, active: bool) {
        metrics::gauge!(m::WAL_RELAY_ACTIVE, "slot" => self.slot.clone(), "relay" => self.config.relay_id.clone())
            .set(if active { 1.0 } else { 0.0 });
    }

    /// The slot's confirmed position, as the server has it.
    pub(super) async fn slot_position(&self) -> Result<Lsn> {
        Ok(slot::find(&self.pool, &self.slot)
            .await?
            .and_then(|s| s.confirmed)
            .unwrap_or(Lsn::ZERO))
    }
}
