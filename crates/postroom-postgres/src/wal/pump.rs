//! One active session of the relay: read committed transactions from the slot into the
//! window, publish the window's batches (several in flight), take in their confirms, and
//! advance the slot's position past what is wholly confirmed.

use super::relay::WalRelay;
use super::stream::{Event, Session};
use super::window::{Batch, Window};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use postroom_core::metrics as m;
use postroom_core::{Error, ErrorKind, Publisher, Result, failpoint};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How a session ended other than by shutdown.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Another relay reads the slot.
    Standby,
    /// Anything else: retried after a backoff.
    Failed(Error),
}

impl From<Error> for Ended {
    fn from(e: Error) -> Self {
        Ended::Failed(e)
    }
}

/// How often the position is sent to the server when it moved (and the oldest commit's age
/// set); the server gets one at least every [`HEARTBEAT`] however things stand.
const STATUS_EVERY: Duration = Duration::from_millis(100);
/// The longest between two status updates (the server's `wal_sender_timeout` is 60 s).
const HEARTBEAT: Duration = Duration::from_secs(5);
/// How often the position row is written (and, in the same task, the retention applied).
const POSITION_EVERY: Duration = Duration::from_secs(1);
/// How often retention runs.
const PURGE_EVERY: Duration = Duration::from_secs(60);
/// The most `retry_after` is multiplied by.
const MAX_BACKOFF_FACTOR: u32 = 64;

type InFlight = FuturesUnordered<BoxFuture<'static, (Batch, Vec<Result<()>>)>>;

impl<P: Publisher + ?Sized + 'static> WalRelay<P> {
    /// Run one session until shutdown (`Ok`) or until it ends otherwise.
    pub(super) async fn stream(
        &self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> std::result::Result<(), Ended> {
        let prepared = self.prepared().await?;
        let mut session = match Session::start(
            &self.target,
            &self.slot,
            &self.publication,
            &prepared.schema,
            &self.prefix,
        )
        .await
        {
            Ok(s) => s,
            Err(e) if e.is_code("55006") => return Err(Ended::Standby),
            Err(e) if e.is_code("42501") => {
                return Err(super::slot::refused_replication(&self.target_user()).into());
            }
            Err(e) => return Err(e.into_error("starting the replication stream").into()),
        };
        let start = self.slot_position().await?;
        tracing::info!(relay = %self.config.relay_id, slot = %self.slot, from = %start, "reading the slot");
        self.active(true);
        let mut window = Window::new(start);
        let mut in_flight: InFlight = FuturesUnordered::new();
        let mut pump = Pump::new(start);
        let ended = loop {
            let reading = window.held() < self.config.max_held;
            let retry_at = window.next_retry();
            tokio::select! {
                biased;
                _ = shutdown.changed() => break Ok(()),
                Some((batch, results)) = in_flight.next() => self.settle(&mut window, batch, results),
                event = session.next(), if reading => match event {
                    Ok(Event::Committed { end_lsn, commit_time, messages, scheduled }) => {
                        window.push_txn(end_lsn, commit_time, messages);
                        if scheduled {
                            self.scheduled.committed();
                        }
                    }
                    Ok(Event::Keepalive { wal_end, reply_now }) => {
                        window.passed(wal_end);
                        if reply_now {
                            pump.due = true;
                        }
                    }
                    Ok(Event::Nothing) => {}
                    Err(e) => break Err(Ended::Failed(e)),
                },
                () = sleep_until(retry_at) => {}
                () = tokio::time::sleep_until(pump.next_status.into()) => pump.due = true,
            }
            while in_flight.len() < self.config.batches_in_flight
                && let Some(batch) = window.next_batch(self.config.batch_size, Instant::now())
            {
                in_flight.push(self.publish(batch));
            }
            if let Err(e) = self.report(&mut session, &window, &mut pump).await {
                break Err(Ended::Failed(e));
            }
        };
        // Wait for the batches in flight, and advance past what they confirmed, if the
        // stream still stands.
        while let Some((batch, results)) = in_flight.next().await {
            self.settle(&mut window, batch, results);
        }
        pump.due = true;
        let _ = self.report(&mut session, &window, &mut pump).await;
        self.write_position(&window).await;
        metrics::gauge!(m::WAL_OLDEST_UNPUBLISHED_AGE, "slot" => self.slot.clone()).set(0.0);
        ended
    }

    fn target_user(&self) -> String {
        self.pool.connect_options().get_username().to_string()
    }

    /// Send `batch` with confirms.
    fn publish(&self, batch: Batch) -> BoxFuture<'static, (Batch, Vec<Result<()>>)> {
        let publisher = self.publisher.clone();
        let relay_id = self.config.relay_id.clone();
        Box::pin(async move {
            let started = Instant::now();
            let results = publisher.publish_batch(&batch.messages).await;
            metrics::histogram!(m::CONFIRM_SECONDS, "transport" => "relay")
                .record(started.elapsed().as_secs_f64());
            failpoint::hit(failpoint::RELAY_AWAITING_CONFIRMS, &relay_id).await;
            (batch, results)
        })
    }

    fn settle(&self, window: &mut Window, batch: Batch, results: Vec<Result<()>>) {
        let relay = &self.config.relay_id;
        let retry_after = self.config.retry_after;
        let ids: Vec<_> = batch.messages.iter().map(|m| m.id).collect();
        for (id, r) in ids.iter().zip(&results) {
            if let Err(e) = r {
                metrics::counter!(m::RELAY_FAILED, "relay" => relay.clone(), "kind" => e.kind().as_str())
                    .increment(1);
                if e.kind() == ErrorKind::InvalidData {
                    tracing::error!(message_id = %id, error = %e, "the broker cannot take this message as it is: it is tried again at the longest delay, the later messages of its aggregate wait behind it, and the slot does not advance past it until it is removed from the broker's way (see the WAL relay's documentation)");
                } else {
                    tracing::warn!(message_id = %id, error = %e, "publish failed; the message is tried again");
                }
            }
        }
        let settled = window.settle(batch, results, Instant::now(), |attempts, e| {
            let factor = if e.kind() == ErrorKind::InvalidData {
                MAX_BACKOFF_FACTOR
            } else {
                (1u32 << attempts.min(6)).min(MAX_BACKOFF_FACTOR)
            };
            retry_after.saturating_mul(factor)
        });
        metrics::counter!(m::RELAY_PUBLISHED, "relay" => relay.clone())
            .increment(settled.published as u64);
    }

    /// Send the position when it moved (at most every [`STATUS_EVERY`]) or when a status is
    /// due; write the position row and apply the retention now and then, in the background.
    async fn report(&self, session: &mut Session, window: &Window, pump: &mut Pump) -> Result<()> {
        let now = Instant::now();
        let confirmed = window.confirmed();
        let moved = confirmed > pump.sent;
        if !(pump.due || (moved && now >= pump.next_status)) {
            return Ok(());
        }
        if moved {
            failpoint::hit(failpoint::WAL_BEFORE_ADVANCE, &self.config.relay_id).await;
        }
        session.send_status(confirmed, false).await?;
        pump.sent = confirmed;
        pump.due = false;
        pump.next_status = now + if moved { STATUS_EVERY } else { HEARTBEAT };
        let age = window
            .oldest_commit_time()
            .map_or(0.0, super::pgoutput::seconds_since);
        metrics::gauge!(m::WAL_OLDEST_UNPUBLISHED_AGE, "slot" => self.slot.clone()).set(age);
        if now >= pump.next_position && pump.background.as_ref().is_none_or(|t| t.is_finished()) {
            pump.next_position = now + POSITION_EVERY;
            let purge = now >= pump.next_purge;
            if purge {
                pump.next_purge = now + PURGE_EVERY;
            }
            pump.background = Some(tokio::spawn(super::retention::keep_position(
                self.pool.clone(),
                self.prefix.clone(),
                self.slot.clone(),
                confirmed,
                window.published_row_seq(),
                self.config.retention.filter(|_| purge),
            )));
        }
        Ok(())
    }

    async fn write_position(&self, window: &Window) {
        super::retention::keep_position(
            self.pool.clone(),
            self.prefix.clone(),
            self.slot.clone(),
            window.confirmed(),
            window.published_row_seq(),
            None,
        )
        .await;
    }
}

/// The session's reporting state.
struct Pump {
    sent: super::lsn::Lsn,
    due: bool,
    next_status: Instant,
    next_position: Instant,
    next_purge: Instant,
    background: Option<tokio::task::JoinHandle<()>>,
}

impl Pump {
    fn new(start: super::lsn::Lsn) -> Self {
        let now = Instant::now();
        Self {
            sent: start,
            due: false,
            next_status: now + STATUS_EVERY,
            next_position: now + POSITION_EVERY,
            next_purge: now,
            background: None,
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
