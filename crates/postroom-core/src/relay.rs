//! The outbox relay, written once against [`OutboxStore`] and [`Publisher`].
//!
//! Claim a batch with a lease, publish it with confirmations, mark published only the rows
//! the broker confirmed, give the others back with a delay. A crash between publish and mark
//! leaves the lease to expire: another relay republishes with the same id, and the
//! consumers' inbox absorbs the copy.

use crate::Result;
use crate::metrics as m;
use crate::outbox::OutboxStore;
use crate::transport::Publisher;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Relay settings.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// This relay's name (several may run at once).
    pub relay_id: String,
    /// Rows per claim.
    pub batch_size: usize,
    /// Lease on claimed rows: longer than a publish batch can take.
    pub lease: Duration,
    /// Longest wait for new rows when the outbox is empty (a notification wakes it sooner).
    pub idle_wait: Duration,
    /// Delay before a row whose publish failed is tried again.
    pub retry_after: Duration,
    /// Published rows older than this are deleted; `None` keeps them.
    pub retention: Option<Duration>,
    /// Claim/publish/mark pipelines this relay runs at once, each on its own store
    /// connection (at least 1). One pipeline is bounded by its store round trips: a fast
    /// broker confirms a batch sooner than the store marks one and claims the next, so a
    /// relay with one lane stops short of what the broker takes. Lanes claim disjoint rows
    /// (the lease), and aggregate order holds across them as it does across relays: a row is
    /// claimable only once every earlier row of its aggregate is published.
    pub lanes: usize,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            relay_id: format!("relay-{}", std::process::id()),
            batch_size: 100,
            lease: Duration::from_secs(30),
            idle_wait: Duration::from_millis(500),
            retry_after: Duration::from_secs(1),
            retention: Some(Duration::from_secs(24 * 3600)),
            lanes: 1,
        }
    }
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayPass {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows published and marked.
    pub published: usize,
    /// Rows whose publish failed and were given back.
    pub failed: usize,
}

/// The most `retry_after` is multiplied by for a row given back again and again.
const MAX_BACKOFF_FACTOR: u32 = 64;

/// Take in the confirms of `rows` (id, earlier publish attempts) leased to `owner`: a
/// confirmed row joins `to_mark`; one that failed is given back to `store`, to be tried again
/// after `retry_after` doubled per earlier attempt (up to 64 times). A row the broker can never
/// take as it is (invalid data: larger than its message limit, say) waits the longest delay at
/// once and is logged as an error: it stays in the outbox (nothing is lost, and the next rows
/// of its aggregate wait behind it, so their order holds) until someone removes or replaces it.
/// Says why giving one back failed, if it did (the others are still given back).
async fn take_confirms<S: OutboxStore + ?Sized>(
    store: &S,
    owner: &str,
    retry_after: Duration,
    rows: impl Iterator<Item = (crate::MessageId, u32)>,
    results: Vec<Result<()>>,
    to_mark: &mut Vec<crate::MessageId>,
) -> Option<crate::Error> {
    let mut failed = None;
    for ((id, attempts), result) in rows.zip(results) {
        match result {
            Ok(()) => to_mark.push(id),
            Err(e) => {
                metrics::counter!(m::RELAY_FAILED, "relay" => owner.to_owned(), "kind" => e.kind().as_str())
                    .increment(1);
                let never = e.kind() == crate::ErrorKind::InvalidData;
                let delay = if never {
                    retry_after.saturating_mul(MAX_BACKOFF_FACTOR)
                } else {
                    retry_after.saturating_mul((1 << attempts.min(6)).min(MAX_BACKOFF_FACTOR))
                };
                if never {
                    tracing::error!(
                        message_id = %id,
                        error = %e,
                        retry_in_s = delay.as_secs(),
                        "the broker cannot take this outbox row as it is: it stays in the outbox, and the later rows of its aggregate wait behind it, until it is removed or replaced"
                    );
                } else {
                    tracing::warn!(message_id = %id, error = %e, "publish failed; row given back");
                }
                if let Err(e) = store.release(owner, id, &e.to_string(), delay).await {
                    failed = Some(e);
                }
            }
        }
    }
    failed
}

/// Rows a producer leased to itself in its transaction, to send once it has committed (how a
/// store leases them is its own: `postroom_postgres::outbox::enqueue_to_send`).
#[derive(Clone, Debug)]
#[must_use = "send the rows after the commit, or the relay sends them once the lease runs out"]
pub struct ToSend {
    owner: String,
    messages: Vec<crate::OutgoingMessage>,
}

impl ToSend {
    /// `messages`, whose rows are leased to `owner`.
    pub fn new(owner: impl Into<String>, messages: Vec<crate::OutgoingMessage>) -> Self {
        Self {
            owner: owner.into(),
            messages,
        }
    }

    /// The leased messages, in the order they were written.
    pub fn messages(&self) -> &[crate::OutgoingMessage] {
        &self.messages
    }

    /// How many rows were leased.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether no row was leased (each waits behind an earlier row of its aggregate).
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

/// What one [`OutboxSender::send`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Confirmed by the broker and marked published.
    pub published: usize,
    /// Not confirmed: given back to the relay.
    pub given_back: usize,
}

/// Sends what producers leased to themselves, right after their commit, as a relay would:
/// publish with confirms, mark the confirmed rows, give the others back to the relay. Rows it
/// never gets to (the producer died) go to the relay once their lease runs out; either way a
/// message goes out again with the same id, and the consumers' inbox absorbs a copy.
pub struct OutboxSender<S: ?Sized, P: ?Sized> {
    store: Arc<S>,
    publisher: Arc<P>,
    retry_after: Duration,
}

impl<S: OutboxStore + ?Sized, P: Publisher + ?Sized> OutboxSender<S, P> {
    /// A sender marking in `store` what `publisher` confirmed.
    pub fn new(store: Arc<S>, publisher: Arc<P>) -> Self {
        Self {
            store,
            publisher,
            retry_after: RelayConfig::default().retry_after,
        }
    }

    /// Publish `rows` with confirms and mark the confirmed ones published; give the others
    /// back to the relay. An error (the mark failed) leaves the confirmed rows leased: the
    /// relay publishes them again once the lease runs out.
    pub async fn send(&self, rows: ToSend) -> Result<Sent> {
        if rows.is_empty() {
            return Ok(Sent::default());
        }
        // One message goes alone, so that producers sending at once share the publisher's
        // confirm round trips (a transport groups single publishes) instead of queueing
        // behind each other's batches.
        let results = match rows.messages.as_slice() {
            [one] => vec![self.publisher.publish(one).await],
            many => self.publisher.publish_batch(many).await,
        };
        let mut ok = Vec::with_capacity(rows.len());
        let ids = rows.messages.iter().map(|m| (m.id, 0));
        let given_back = take_confirms(
            &*self.store,
            &rows.owner,
            self.retry_after,
            ids,
            results,
            &mut ok,
        )
        .await;
        if let Some(e) = given_back {
            return Err(e);
        }
        if !ok.is_empty() {
            self.store.mark_published(&rows.owner, &ok).await?;
        }
        Ok(Sent {
            published: ok.len(),
            given_back: rows.len() - ok.len(),
        })
    }
}

/// What a lane's store side did while its batch was on the way to the broker.
enum Database {
    /// Nothing (the next claim follows the confirms).
    Idle,
    /// Marked what was confirmed before and claimed the next batch.
    Claimed(Result<Vec<crate::outbox::OutboxRecord>>),
    /// Rows that arrived meanwhile, claimed and sent: their confirms.
    Early(Vec<crate::outbox::OutboxRecord>, Vec<Result<()>>),
}

/// The relay.
pub struct OutboxRelay<S: ?Sized, P: ?Sized> {
    store: Arc<S>,
    publisher: Arc<P>,
    config: RelayConfig,
}

impl<S: OutboxStore + ?Sized, P: Publisher + ?Sized> OutboxRelay<S, P> {
    /// A relay over `store` publishing with `publisher`.
    pub fn new(store: Arc<S>, publisher: Arc<P>, config: RelayConfig) -> Self {
        Self {
            store,
            publisher,
            config,
        }
    }

    /// Claim, publish, mark once.
    pub async fn run_once(&self) -> Result<RelayPass> {
        let cfg = &self.config;
        let rows = self
            .store
            .claim(&cfg.relay_id, cfg.batch_size, cfg.lease)
            .await?;
        if rows.is_empty() {
            return Ok(RelayPass::default());
        }
        let results = self.publish(&rows).await;
        let mut ok = Vec::with_capacity(rows.len());
        let given_back = self.take_results(&rows, results, &mut ok).await;
        let failed = rows.len() - ok.len();
        if let Some(e) = given_back {
            return Err(e);
        }
        if !ok.is_empty() {
            crate::failpoint::hit(crate::failpoint::RELAY_BEFORE_MARK, &cfg.relay_id).await;
            self.store.mark_published(&cfg.relay_id, &ok).await?;
        }
        metrics::counter!(m::RELAY_PUBLISHED, "relay" => cfg.relay_id.clone())
            .increment(ok.len() as u64);
        Ok(RelayPass {
            claimed: rows.len(),
            published: ok.len(),
            failed,
        })
    }

    /// Mark `published` and empty it, then claim the next batch. A failed mark keeps the
    /// ids (marked on the next pass; if that never succeeds the leases expire and the rows
    /// are published again with the same ids) and claims nothing.
    async fn mark_then_claim(
        &self,
        published: &mut Vec<crate::MessageId>,
    ) -> Result<Vec<crate::outbox::OutboxRecord>> {
        let cfg = &self.config;
        let rows = self
            .store
            .mark_and_claim(&cfg.relay_id, published, cfg.batch_size, cfg.lease)
            .await?;
        if !published.is_empty() {
            metrics::counter!(m::RELAY_PUBLISHED, "relay" => cfg.relay_id.clone())
                .increment(published.len() as u64);
            published.clear();
        }
        Ok(rows)
    }

    /// Send `rows` to the broker and wait for their confirms, one result per row.
    async fn publish(&self, rows: &[crate::outbox::OutboxRecord]) -> Vec<Result<()>> {
        if rows.is_empty() {
            return Vec::new();
        }
        let messages: Vec<_> = rows.iter().map(|r| r.to_message()).collect();
        let started = Instant::now();
        let results = self.publisher.publish_batch(&messages).await;
        metrics::histogram!(m::CONFIRM_SECONDS, "transport" => "relay")
            .record(started.elapsed().as_secs_f64());
        crate::failpoint::hit(
            crate::failpoint::RELAY_AWAITING_CONFIRMS,
            &self.config.relay_id,
        )
        .await;
        results
    }

    /// Take in the confirms of `rows` (see [`take_confirms`]).
    async fn take_results(
        &self,
        rows: &[crate::outbox::OutboxRecord],
        results: Vec<Result<()>>,
        to_mark: &mut Vec<crate::MessageId>,
    ) -> Option<crate::Error> {
        let cfg = &self.config;
        let rows = rows.iter().map(|r| (r.id, r.publish_attempts));
        take_confirms(
            &*self.store,
            &cfg.relay_id,
            cfg.retry_after,
            rows,
            results,
            to_mark,
        )
        .await
    }

    /// While a short batch waits for its confirms (`confirmed` not yet notified): as soon as
    /// rows arrive, claim them and send them at once.
    async fn early(
        &self,
        to_mark: &mut Vec<crate::MessageId>,
        confirmed: &tokio::sync::Notify,
    ) -> Database {
        let cfg = &self.config;
        loop {
            tokio::select! {
                biased;
                () = confirmed.notified() => return Database::Idle,
                () = self.store.wait_for_rows(&cfg.relay_id, cfg.idle_wait) => {}
            }
            match self.mark_then_claim(to_mark).await {
                Ok(rows) if rows.is_empty() => {}
                Ok(rows) => {
                    let results = self.publish(&rows).await;
                    return Database::Early(rows, results);
                }
                Err(e) => return Database::Claimed(Err(e)),
            }
        }
    }

    /// Run until `shutdown` turns true, [`RelayConfig::lanes`] pipelines at once. Store errors
    /// are logged and retried with a bounded, jittered backoff; they never end the loop.
    pub async fn run(&self, shutdown: watch::Receiver<bool>) {
        let lanes =
            (0..self.config.lanes.max(1)).map(|lane| self.lane(lane == 0, shutdown.clone()));
        futures::future::join_all(lanes).await;
    }

    /// One pipeline; `purges` whether this one deletes published rows past the retention.
    async fn lane(&self, purges: bool, mut shutdown: watch::Receiver<bool>) {
        let cfg = &self.config;
        let mut backoff =
            crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let mut last_purge = Instant::now();
        // The pipeline: while batch n waits for its confirms, batch n-1 is marked published
        // and batch n+1 is claimed. Order still holds: rows of batch n are unpublished, so
        // the claim skips their successors; a successor of batch n-1 is claimable only once
        // the mark of its predecessor has committed.
        //
        // Only a full batch is pipelined. A short claim means the outbox is nearly drained
        // or other relays hold the heads; holding a second batch then only takes heads from
        // them, so the next claim waits until this batch is marked, unless rows arrive while
        // the batch waits for its confirms: those are claimed and sent at once (`early`),
        // instead of queueing behind confirms they do not depend on (the same argument keeps
        // their order: no row of the early batch follows a row of the unconfirmed one).
        let mut batch: Vec<crate::outbox::OutboxRecord> = Vec::new();
        let mut to_mark: Vec<crate::MessageId> = Vec::new();
        while !*shutdown.borrow() && shutdown.has_changed().is_ok() {
            let pipelined = batch.len() >= cfg.batch_size;
            let confirmed = tokio::sync::Notify::new();
            let publish = async {
                let results = self.publish(&batch).await;
                confirmed.notify_one();
                results
            };
            let database = async {
                if pipelined {
                    Database::Claimed(self.mark_then_claim(&mut to_mark).await)
                } else if batch.is_empty() {
                    Database::Idle
                } else {
                    self.early(&mut to_mark, &confirmed).await
                }
            };
            let (results, database) = tokio::join!(publish, database);
            let mut failed = self.take_results(&batch, results, &mut to_mark).await;
            let claimed = match database {
                Database::Claimed(next) => Some(next),
                Database::Idle => None,
                Database::Early(rows, results) => {
                    if let Some(e) = self.take_results(&rows, results, &mut to_mark).await {
                        failed = Some(e);
                    }
                    None
                }
            };
            if !to_mark.is_empty() {
                crate::failpoint::hit(crate::failpoint::RELAY_BEFORE_MARK, &cfg.relay_id).await;
            }
            let next = match claimed {
                Some(next) => next,
                // Not pipelined: mark what is confirmed and claim, one after the other.
                None => self.mark_then_claim(&mut to_mark).await,
            };
            batch = match next {
                Ok(rows) => rows,
                Err(e) => {
                    failed = Some(e);
                    Vec::new()
                }
            };
            let pause = if let Some(e) = failed {
                let d = backoff.next_delay();
                tracing::warn!(error = %e, retry_in_ms = d.as_millis() as u64, "relay pass failed");
                Some(d)
            } else {
                backoff.reset();
                (batch.is_empty() && to_mark.is_empty()).then_some(cfg.idle_wait)
            };
            if purges
                && let Some(ret) = cfg.retention
                && last_purge.elapsed() > Duration::from_secs(60)
            {
                last_purge = Instant::now();
                if let Err(e) = self.store.purge_published(ret).await {
                    tracing::warn!(error = %e, "outbox retention purge failed");
                }
            }
            if let Some(d) = pause {
                tokio::select! {
                    _ = self.store.wait_for_rows(&cfg.relay_id, d) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
        // Shutting down: mark what was confirmed, give back what was claimed and not published.
        if !to_mark.is_empty()
            && let Err(e) = self.store.mark_published(&cfg.relay_id, &to_mark).await
        {
            tracing::warn!(error = %e, "final mark failed; the rows will be published again");
        }
        for row in &batch {
            let _ = self
                .store
                .release(
                    &cfg.relay_id,
                    row.id,
                    "relay shut down before publishing",
                    Duration::ZERO,
                )
                .await;
        }
    }
}
