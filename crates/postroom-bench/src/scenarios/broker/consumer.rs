//! The consumer scenario on any broker: broker → handler → inbox row + business update in one
//! PostgreSQL transaction → settled, postroom's `Consumer` on the transport's subscriber
//! beside the broker's raw client running the same transaction
//! ([`raw_inbox::apply`](super::raw_inbox::apply)) at the same concurrency. Each round on
//! `n` fresh messages; the pair `--rounds` times, alternating which goes first. Target ≥ 80 %.

use super::{BrokerWorkload, Figure, on_workload};
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::payload;
use crate::report::{Load, Measurement, Target};
use crate::resources::bench_subscription;
use crate::scenarios::alternate;
use crate::scenarios::handler::{
    InboxHandler, Progress, consumer_config, timed_consumer, timed_from_first,
};
use postroom_core::{Consumer, OutgoingMessage, Subscription};
use sqlx::PgPool;
use std::sync::Arc;

/// The shape of one consumer round.
#[derive(Clone, Copy, Debug)]
pub struct ConsumerLoad {
    /// Messages.
    pub n: usize,
    /// Handlers (raw: transactions) running at once.
    pub concurrency: usize,
    /// The subscriber's prefetch.
    pub prefetch: u16,
}

/// When a round's clock starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// When the consumer starts.
    AtStart,
    /// When the first message is handled: joining a consumer group (seconds on some
    /// brokers) counts on neither side.
    AtFirstHandled,
}

/// What a broker adds to the consumer scenario: how its queue is filled, the subscription
/// postroom's consumer takes, and its raw client's consuming loop.
#[async_trait::async_trait]
pub trait RawConsumer: BrokerWorkload {
    /// Put `messages` into the consumer's queue, before the clock starts.
    async fn fill(&self, messages: &[OutgoingMessage], prefetch: u16) -> Result<(), BenchError>;

    /// The route the bench consumer is bound to on this broker.
    const BINDING: &'static str;

    /// postroom's subscription of the bench consumer, bound to [`BINDING`](Self::BINDING).
    fn subscription(&self, prefetch: u16) -> Subscription {
        bench_subscription(Self::BINDING, prefetch)
    }

    /// Time the raw loop until it handled and settled `load.n` messages, applying each with
    /// [`raw_inbox::apply`](super::raw_inbox::apply) on `pool`.
    async fn raw_round(&self, pool: &PgPool, load: &ConsumerLoad) -> Result<f64, BenchError>;
}

/// Run the consumer scenario on the broker of `W`, workloads named `consumer`.
pub async fn run<W: RawConsumer>(
    ctx: &Ctx,
    figure: Figure,
    clock: Clock,
) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let load = ConsumerLoad {
        n: W::messages(a),
        concurrency: usize::from(a.concurrency),
        prefetch: a.prefetch,
    };
    let pool = ctx
        .db()?
        .store(u32::from(a.concurrency))
        .await?
        .pool()
        .clone();
    let shared = if figure.fresh_per_round {
        None
    } else {
        Some(W::create(ctx, "consumer").await?)
    };
    let messages = async |w: &W| {
        let msgs = payload::messages(0, load.n, a.payload_bytes);
        w.fill(&msgs, load.prefetch).await
    };
    let (ours, raw) = alternate(
        a.rounds(),
        async || {
            on_workload(ctx, "consumer", shared.as_ref(), async |w: &W| {
                messages(w).await?;
                postroom_round(w, &pool, &load, clock).await
            })
            .await
        },
        async || {
            on_workload(ctx, "consumer", shared.as_ref(), async |w: &W| {
                messages(w).await?;
                w.raw_round(&pool, &load).await
            })
            .await
        },
    )
    .await?;
    pool.close().await;
    if let Some(w) = shared {
        w.delete().await?;
    }
    Ok(figure.measurement(
        &ours,
        &raw,
        Target::at_least(0.8),
        Load::new(
            a.payload_bytes,
            load.concurrency,
            usize::from(load.prefetch),
            1,
            load.n,
        ),
    ))
}

/// Time postroom's consumer until it handled and settled `load.n` messages.
async fn postroom_round<W: RawConsumer>(
    w: &W,
    pool: &PgPool,
    load: &ConsumerLoad,
    clock: Clock,
) -> Result<f64, BenchError> {
    let transport = w.transport();
    let who = format!("postroom {} consumer", transport.name());
    let progress = Arc::new(Progress::default());
    let handler = Arc::new(InboxHandler::new(pool.clone(), progress.clone()));
    let subscription = w.subscription(load.prefetch);
    match clock {
        Clock::AtStart => {
            let sub = transport
                .subscribe(&subscription)
                .await
                .ctx("subscribing the bench consumer")?;
            timed_consumer(handler, load.concurrency, sub, &progress, load.n, &who).await
        }
        Clock::AtFirstHandled => {
            let consumer = Consumer::for_transport(
                consumer_config(load.concurrency),
                handler,
                &transport.capabilities(),
            )
            .ctx("consumer settings")?;
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let (ran, per_sec) =
                tokio::join!(consumer.run_on(transport, &subscription, stopped), async {
                    let r = timed_from_first(&progress, load.n, &who).await;
                    let _ = stop.send(true);
                    r
                });
            ran.ctx("postroom consumer")?;
            per_sec
        }
    }
}
