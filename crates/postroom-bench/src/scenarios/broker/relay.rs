//! The relay scenario on any broker: postroom's `OutboxRelay` from the PostgreSQL outbox
//! through the transport's confirming publisher, beside the broker's raw client publishing the
//! same payloads with the relay's batch as its window, no database. `--relays` of each, the
//! pair `--rounds` times, alternating which goes first. Target ≥ 90 %.

use super::{BrokerWorkload, Figure, on_workload};
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::payload;
use crate::report::{Load, Measurement, Target};
use crate::scenarios::{alternate, rate, timeout};
use postroom_core::{OutboxRelay, OutboxStore, OutgoingMessage, Publisher, RelayConfig};
use postroom_postgres::{PgStore, commit, outbox};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The shape of one relay round.
#[derive(Clone, Copy, Debug)]
pub struct RelayLoad {
    /// Messages.
    pub n: usize,
    /// The relay's batch, and the raw loop's window.
    pub batch: usize,
    /// Relays, and raw senders.
    pub relays: usize,
    /// Pipelines of each relay.
    pub lanes: usize,
    /// Body size.
    pub bytes: usize,
    /// Whether the outbox deletes confirmed rows instead of marking them.
    pub delete_published: bool,
    /// Whether the messages are built without an aggregate (each its own key, unordered)
    /// instead of spread over the payload's aggregates.
    pub unordered: bool,
}

impl RelayLoad {
    /// Message `i` of a round.
    #[must_use]
    pub fn message(&self, i: usize) -> OutgoingMessage {
        if self.unordered {
            payload::unordered_message(i, self.bytes)
        } else {
            payload::message(i, self.bytes)
        }
    }
}

/// What a broker adds to the relay scenario: its raw client's publishing loop, and how to
/// tell that every message arrived.
#[async_trait::async_trait]
pub trait RawRelay: BrokerWorkload {
    /// One raw sender (a channel, a producer; `()` where senders share one client).
    type Sender: Send + Sync;

    /// `load.relays` senders, connected and ready before the clock starts.
    async fn raw_senders(&self, load: &RelayLoad) -> Result<Vec<Self::Sender>, BenchError>;

    /// Publish `part` with `sender`, `window` in flight; every message confirmed.
    async fn raw_send(
        &self,
        sender: &Self::Sender,
        part: &[OutgoingMessage],
        window: usize,
    ) -> Result<(), BenchError>;

    /// Close the senders after the round.
    async fn close_senders(&self, _senders: Vec<Self::Sender>) {}

    /// An error unless all `n` messages of the round arrived; leaves the destination empty
    /// for the next round where the broker allows. `confirmed` is what postroom's publisher
    /// counted as confirmed (`None` after the raw round, whose loop fails on any
    /// unconfirmed message).
    async fn check_arrived(&self, n: usize, confirmed: Option<usize>) -> Result<(), BenchError>;
}

/// A [`RawRelay`] whose raw senders all share the workload's one client (`()` senders, one
/// per relay): it only says how to publish a part and how to tell that every message arrived.
#[async_trait::async_trait]
pub trait SharedClientRelay: BrokerWorkload {
    /// Publish `part` with the shared client, `window` in flight; every message confirmed.
    async fn send_part(&self, part: &[OutgoingMessage], window: usize) -> Result<(), BenchError>;

    /// See [`RawRelay::check_arrived`].
    async fn all_arrived(&self, n: usize, confirmed: Option<usize>) -> Result<(), BenchError>;
}

#[async_trait::async_trait]
impl<W: SharedClientRelay> RawRelay for W {
    type Sender = ();

    async fn raw_senders(&self, load: &RelayLoad) -> Result<Vec<()>, BenchError> {
        Ok(vec![(); load.relays])
    }

    async fn raw_send(
        &self,
        _: &(),
        part: &[OutgoingMessage],
        window: usize,
    ) -> Result<(), BenchError> {
        self.send_part(part, window).await
    }

    async fn check_arrived(&self, n: usize, confirmed: Option<usize>) -> Result<(), BenchError> {
        self.all_arrived(n, confirmed).await
    }
}

/// The relay's publisher, counting confirmed messages so that the round can tell when it is
/// done without asking the database (a `count(*)` every few milliseconds would take
/// PostgreSQL's CPU away from the relay it measures).
pub struct Counting<P: ?Sized> {
    /// The publisher that confirms.
    pub inner: Arc<P>,
    /// Messages it confirmed.
    pub confirmed: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl<P: Publisher + ?Sized> Publisher for Counting<P> {
    async fn publish(&self, message: &OutgoingMessage) -> postroom_core::Result<()> {
        let r = self.inner.publish(message).await;
        if r.is_ok() {
            self.confirmed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<postroom_core::Result<()>> {
        let rs = self.inner.publish_batch(messages).await;
        let ok = rs.iter().filter(|r| r.is_ok()).count();
        self.confirmed.fetch_add(ok, Ordering::Relaxed);
        rs
    }
}

/// Run the relay scenario on the broker of `W`, workloads named `relay`.
pub async fn run<W: RawRelay>(ctx: &Ctx, figure: Figure) -> Result<Measurement, BenchError> {
    run_shaped::<W>(ctx, figure, false).await
}

/// [`run`] with messages built without an aggregate: what such messages cost the relay,
/// beside the figure of messages spread over aggregates.
pub async fn run_unordered<W: RawRelay>(
    ctx: &Ctx,
    figure: Figure,
) -> Result<Measurement, BenchError> {
    run_shaped::<W>(ctx, figure, true).await
}

async fn run_shaped<W: RawRelay>(
    ctx: &Ctx,
    figure: Figure,
    unordered: bool,
) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let load = RelayLoad {
        n: W::messages(a),
        batch: usize::from(a.batch),
        relays: usize::from(a.relays),
        lanes: usize::from(a.relay_lanes),
        bytes: a.payload_bytes,
        delete_published: a.relay_delete_published,
        unordered,
    };
    let store = ctx
        .db()?
        .store(u32::from(a.relays) * u32::from(a.relay_lanes) + 2)
        .await?;
    let shared = if figure.fresh_per_round {
        None
    } else {
        Some(W::create(ctx, "relay").await?)
    };
    let (ours, raw) = alternate(
        a.rounds(),
        async || {
            on_workload(ctx, "relay", shared.as_ref(), async |w: &W| {
                postroom_round(&store, w, &load).await
            })
            .await
        },
        async || {
            on_workload(ctx, "relay", shared.as_ref(), async |w: &W| {
                raw_round(w, &load).await
            })
            .await
        },
    )
    .await?;
    store.pool().close().await;
    if let Some(w) = shared {
        w.delete().await?;
    }
    Ok(figure
        .measurement(
            &ours,
            &raw,
            Target::at_least(0.9),
            Load::new(load.bytes, load.relays * load.lanes, 0, load.batch, load.n),
        )
        .detail("outbox_deletes_published", load.delete_published)
        .detail("messages_without_aggregate", load.unordered))
}

/// Fill the outbox, then time the relays until every row is confirmed by the broker and
/// marked published; checks every message arrived.
async fn postroom_round<W: RawRelay>(
    store: &PgStore,
    w: &W,
    load: &RelayLoad,
) -> Result<f64, BenchError> {
    let n = load.n;
    fill_outbox(store, n, |i| load.message(i)).await?;
    let ob: Arc<dyn OutboxStore> = if load.delete_published {
        Arc::new(store.outbox().delete_on_publish())
    } else {
        Arc::new(store.outbox())
    };
    let transport = w.transport();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let confirmed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..load.relays {
        let cfg = RelayConfig {
            relay_id: format!("bench-{}-{i}", transport.name()),
            batch_size: load.batch,
            retention: None,
            lanes: load.lanes,
            ..RelayConfig::default()
        };
        let publisher = Arc::new(Counting {
            inner: transport.publisher(),
            confirmed: confirmed.clone(),
        });
        let relay = OutboxRelay::new(ob.clone(), publisher, cfg);
        let rx = stop_rx.clone();
        // The loop users run: pipelined (publish n while marking n-1 and claiming n+1).
        tasks.push(tokio::spawn(async move { relay.run(rx).await }));
    }
    let deadline = Instant::now() + timeout(n);
    while confirmed.load(Ordering::Relaxed) < n || ob.pending().await.ctx("pending rows")? > 0 {
        if Instant::now() > deadline {
            let _ = stop.send(true);
            return Err(BenchError::Stalled(format!(
                "the {} relay confirmed {} of {n}",
                transport.name(),
                confirmed.load(Ordering::Relaxed)
            )));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("relay task: {e}")))?;
    }
    w.check_arrived(n, Some(confirmed.load(Ordering::Relaxed)))
        .await?;
    Ok(rate(n, elapsed))
}

/// Time the raw senders publishing the same payloads, the messages shared out among them.
pub async fn raw_round<W: RawRelay>(w: &W, load: &RelayLoad) -> Result<f64, BenchError> {
    let msgs: Vec<OutgoingMessage> = (0..load.n).map(|i| load.message(i)).collect();
    let senders = w.raw_senders(load).await?;
    let share = load.n.div_ceil(load.relays);
    let started = Instant::now();
    let results = futures::future::join_all(
        senders
            .iter()
            .zip(msgs.chunks(share))
            .map(|(s, part)| w.raw_send(s, part, load.batch)),
    )
    .await;
    let per_sec = rate(load.n, started.elapsed());
    for r in results {
        r?;
    }
    w.close_senders(senders).await;
    w.check_arrived(load.n, None).await?;
    Ok(per_sec)
}

/// Empty the outbox and write messages `0..n` made by `make` into it (500 a statement, 5000
/// a transaction; made a transaction at a time, so a backlog of millions fits in memory).
pub async fn fill_outbox(
    store: &PgStore,
    n: usize,
    make: impl Fn(usize) -> OutgoingMessage,
) -> Result<(), BenchError> {
    sqlx::query("TRUNCATE postroom_outbox")
        .execute(store.pool())
        .await
        .ctx("emptying the outbox")?;
    for from in (0..n).step_by(5000) {
        let chunk: Vec<_> = (from..n.min(from + 5000)).map(&make).collect();
        let mut tx = store.begin().await.ctx("begin")?;
        for part in chunk.chunks(500) {
            outbox::enqueue_batch(&mut tx, store.prefix(), part)
                .await
                .ctx("filling the outbox")?;
        }
        commit(tx).await.ctx("commit")?;
    }
    // A production outbox has planner statistics; give the fresh rows some too.
    sqlx::query("ANALYZE postroom_outbox")
        .execute(store.pool())
        .await
        .ctx("analyze")?;
    Ok(())
}
