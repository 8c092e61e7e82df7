//! Waking relays when outbox rows may have become claimable: new rows (a statement trigger)
//! and published rows, whose successors in the same aggregate are now heads (the mark
//! notifies), both `NOTIFY {prefix}outbox`.
//!
//! One task per outbox listens on a dedicated connection and counts notifications; every relay
//! of the process waits on that count. A relay remembers the count it saw when its last claim
//! began, so a notification that arrives between an empty claim and the wait is not lost: the
//! wait returns at once. While the listening connection cannot be had, waiting is plain
//! sleeping (polling), and the task keeps trying to reconnect.
//!
//! A scheduled row falling due sends no notification: every claim says when the next one
//! falls due, a wait ends then at the latest, and a claim after that time scans the table
//! even if nothing was notified.

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What the listening task shares with the waiters.
#[derive(Debug, Default)]
struct Signal {
    /// Notifications received so far.
    count: AtomicU64,
    /// The listener is connected and listening (otherwise waiters poll).
    listening: AtomicBool,
    notify: Notify,
}

/// A relay's last claims.
#[derive(Clone, Copy, Debug)]
struct LastClaim {
    /// The notification count when its last claim of any kind began.
    count: u64,
    /// Its last scan of the outbox found nothing: the notification count and the time when
    /// that scan began.
    empty_scan: Option<(u64, Instant)>,
    /// Its last telling scan found heads densely (it got all it asked for, at least half a
    /// batch): the next scan locks rows before looking at their aggregates.
    dense: bool,
}

/// How a claim begins (see [`Wakeup::claiming`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClaimStart {
    count: u64,
    began: Instant,
    /// A scan of the oldest rows would find nothing new.
    pub(crate) skip_scan: bool,
    /// Lock rows before probing their aggregates (heads were dense).
    pub(crate) lock_first: bool,
}

/// How long a claim that found nothing is not repeated unless a notification arrives: rows
/// whose lease ran out or whose delay ended send none, so this bounds how late they are seen
/// by a relay that keeps calling (the relay's own idle wait is longer).
const RECHECK: Duration = Duration::from_millis(100);

/// The wake-up of one outbox channel.
#[derive(Debug)]
pub(crate) struct Wakeup {
    pool: PgPool,
    channel: String,
    signal: Arc<Signal>,
    /// Per relay: its last claim.
    seen: Mutex<HashMap<String, LastClaim>>,
    /// When the next scheduled row falls due, as the last claim saw it.
    next_due: NextDue,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Wakeup {
    pub(crate) fn new(pool: PgPool, channel: String) -> Self {
        Self {
            pool,
            channel,
            signal: Arc::default(),
            seen: Mutex::default(),
            next_due: NextDue::default(),
            task: Mutex::default(),
        }
    }

    /// A claim by `relay` is about to look at the table: what it finds reflects at least
    /// every notification counted so far. Says how it should scan the oldest rows:
    ///
    /// - not at all (`skip_scan`) when that would find nothing new: the relay's last scan
    ///   found nothing, no notification arrived since it began (while listening), and it
    ///   began less than [`RECHECK`] ago. A relay whose heads are all held by other relays
    ///   (each keeping the aggregates it publishes) then does not scan for nothing on every
    ///   pass. The relay's own marks need no notification here: they leave new heads only
    ///   when it took them or notified.
    /// - locking rows before probing them (`lock_first`) when its last telling scan found
    ///   heads densely.
    pub(crate) fn claiming(&self, relay: &str) -> ClaimStart {
        self.start();
        let count = self.signal.count.load(Ordering::Acquire);
        let listening = self.signal.listening.load(Ordering::Acquire);
        let mut seen = self.seen();
        let last = seen.entry(relay.to_owned()).or_insert(LastClaim {
            count,
            empty_scan: None,
            dense: false,
        });
        last.count = count;
        let (dense, empty_scan) = (last.dense, last.empty_scan);
        drop(seen);
        let now = Instant::now();
        let fell_due = self.next_due().is_some_and(|due| due <= now);
        ClaimStart {
            count,
            began: now,
            skip_scan: listening
                && !fell_due
                && empty_scan.is_some_and(|(c, began)| c == count && began.elapsed() < RECHECK),
            lock_first: dense,
        }
    }

    /// What a claim said about the next scheduled row: it falls due in `seconds` (none is
    /// waiting if `None`).
    pub(crate) fn next_due_in(&self, seconds: Option<f64>) {
        self.next_due.set_in(seconds);
    }

    fn next_due(&self) -> Option<Instant> {
        self.next_due.get()
    }

    /// What `relay`'s scan of the outbox, begun as `start`, found: `rows` of the `asked` it
    /// looked for, in a batch of `limit`.
    pub(crate) fn scanned(
        &self,
        relay: &str,
        start: &ClaimStart,
        (rows, asked, limit): (usize, usize, usize),
    ) {
        if let Some(s) = self.seen().get_mut(relay) {
            s.empty_scan = (rows == 0).then_some((start.count, start.began));
            if rows < asked {
                s.dense = false;
            } else if asked.saturating_mul(2) >= limit {
                s.dense = true;
            }
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, LastClaim>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Return when a notification arrived since `relay`'s last claim began (at once if one
    /// already has), when the next scheduled row falls due, or after `max_wait`.
    pub(crate) async fn wait(&self, relay: &str, max_wait: Duration) {
        self.start();
        let max_wait = match self.next_due() {
            Some(due) => max_wait.min(due.saturating_duration_since(Instant::now())),
            None => max_wait,
        };
        let notified = self.signal.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let seen = self.seen().get(relay).map(|s| s.count);
        let now = self.signal.count.load(Ordering::Acquire);
        if seen.is_some_and(|s| s != now) {
            return;
        }
        // While nobody listens this is polling, except that the listener wakes every waiter
        // once it connects (rows may have come meanwhile): a relay that began waiting before
        // its listener was up does not sleep through the rows written since.
        let _ = tokio::time::timeout(max_wait, notified).await;
    }

    /// Start the listening task once (it needs a runtime, so not in `new`).
    fn start(&self) {
        let mut task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if task.is_some() {
            return;
        }
        let (pool, channel, signal) =
            (self.pool.clone(), self.channel.clone(), self.signal.clone());
        *task = Some(tokio::spawn(listen(pool, channel, signal)));
    }
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

/// Listen, count, wake; reconnect with a growing pause when the connection is lost.
async fn listen(pool: PgPool, channel: String, signal: Arc<Signal>) {
    let mut backoff =
        postroom_core::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let mut listener = match connect(&pool, &channel).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "outbox LISTEN unavailable; relays poll meanwhile");
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        backoff.reset();
        signal.listening.store(true, Ordering::Release);
        // Anything may have happened while nobody listened.
        wake(&signal);
        loop {
            match listener.try_recv().await {
                Ok(Some(_)) => {
                    // Fold notifications that queued up meanwhile into this wake-up.
                    while listener.next_buffered().is_some() {}
                    wake(&signal);
                }
                // The connection dropped; the next call reconnects. Notifications sent
                // meanwhile are lost, so wake everyone to look.
                Ok(None) => wake(&signal),
                Err(e) => {
                    tracing::debug!(error = %e, "outbox LISTEN connection lost; relays poll until it is back");
                    signal.listening.store(false, Ordering::Release);
                    wake(&signal);
                    break;
                }
            }
        }
    }
}

fn wake(signal: &Signal) {
    signal.count.fetch_add(1, Ordering::AcqRel);
    signal.notify.notify_waiters();
}

/// The listener gets a connection of its own, outside the store's pool: it holds it for
/// good, and taking it from the pool would leave a pool of one with nothing for the relay.
async fn connect(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let own = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_with(pool.connect_options().as_ref().clone())
        .await?;
    let mut l = PgListener::connect_with(&own).await?;
    l.ignore_pool_close_event(true);
    // Channels are per database: the schema the tables live in is part of the name, so two
    // installations with one prefix in two schemas do not wake each other's relays.
    let schema: String = sqlx::query_scalar("SELECT current_schema()")
        .fetch_one(&mut l)
        .await?;
    l.listen(&format!("{schema}.{channel}")).await?;
    Ok(l)
}

/// When the next scheduled row falls due, as the last claim said: what a relay's wait is
/// capped by.
#[derive(Debug, Default)]
pub(crate) struct NextDue(Mutex<Option<Instant>>);

impl NextDue {
    /// The next row falls due in `seconds` from now (none is waiting if `None`; a value that
    /// is not a finite number of seconds counts as none).
    pub(crate) fn set_in(&self, seconds: Option<f64>) {
        let due = seconds
            .filter(|s| s.is_finite())
            .map(|s| Instant::now() + Duration::from_secs_f64(s.clamp(0.0, 1e9)));
        *postroom_core::sync::lock_unpoisoned(&self.0) = due;
    }

    /// When the next row falls due, if one is waiting.
    pub(crate) fn get(&self) -> Option<Instant> {
        *postroom_core::sync::lock_unpoisoned(&self.0)
    }
}
