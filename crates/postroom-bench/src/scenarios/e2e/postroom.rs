//! postroom's side of the e2e scenario: the producer writes the orders into the PostgreSQL
//! outbox (`--batch` rows a transaction), one `OutboxRelay` sends them to the RabbitMQ work
//! exchange, and postroom's consumer applies each with its inbox row and a counter update in
//! one transaction: per message (`Consumer`), the claim and the update as one statement
//! (`inbox::apply_once`) or as a transaction of four (`BEGIN`, claim, update, `COMMIT`, as
//! the raw service writes it), or many at once (`BatchConsumer`). A message that fails once is
//! retried by the broker's delay stage; an undecodable one is parked.

use super::mix::{Kind, Ledger, Mix, index_of};
use crate::error::{BenchError, Context};
use crate::resources::pg::add_effects;
use crate::resources::rabbit::{CONSUMER, Workload};
use crate::scenarios::handler::claim_and_apply;
use postroom_core::consumer::{BatchConfig, BatchConsumer};
use postroom_core::stats::StatsSnapshot;
use postroom_core::{
    BatchHandler, Consumer, ConsumerConfig, Handled, Handler, HandlerError, Incoming, MessageId,
    OutboxRelay, RelayConfig, RetryLadder, RetryPolicy, async_trait,
};
use postroom_postgres::{PgStore, TablePrefix, commit, inbox, map_error, outbox};
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Which consumer applies the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `Consumer`: the inbox claim and the update in one statement (`inbox::apply_once`).
    PerMessage,
    /// `Consumer`: `BEGIN`, the inbox claim, the update, `COMMIT`.
    PerMessageTransaction,
    /// `BatchConsumer`: one transaction per batch.
    Batched,
}

/// The e2e handler: fails a message of kind [`Kind::FailsOnce`] on its first attempt, and
/// applies the others with their inbox row and a counter update in one transaction.
pub struct OrderHandler {
    pool: PgPool,
    prefix: TablePrefix,
    mix: Mix,
    ledger: Arc<Ledger>,
    mode: Mode,
    /// The one-statement claim and update ([`Mode::PerMessage`]), built once.
    once: inbox::OnceEffect,
}

/// The counter update of [`EFFECT_SQL`](crate::resources::pg::EFFECT_SQL) taking its row from the claim (`inbox::apply_once`).
const EFFECT_ONCE_SQL: &str = "INSERT INTO bench_effects (key, n) SELECT $3, 1 FROM postroom_claim
    ON CONFLICT (key) DO UPDATE SET n = bench_effects.n + 1";

fn index(m: &Incoming) -> Result<usize, HandlerError> {
    index_of(m).ok_or_else(|| HandlerError::permanent("bench_no_index", "no index in the data"))
}

fn first_failure(m: &Incoming, mix: &Mix, i: usize) -> Option<HandlerError> {
    (mix.kind(i) == Kind::FailsOnce && m.attempt == 0).then(|| {
        HandlerError::transient("bench_fails_once", "this order fails on its first delivery")
    })
}

#[async_trait]
impl Handler for OrderHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let i = index(m)?;
        if let Some(e) = first_failure(m, &self.mix, i) {
            return Err(e);
        }
        let fresh = if self.mode == Mode::PerMessage {
            self.once
                .apply(CONSUMER, m.envelope.id)
                .bind(&m.envelope.aggregate.id)
                .execute(&self.pool)
                .await?
        } else {
            claim_and_apply(&self.pool, &self.prefix, &m.envelope).await?
        };
        if fresh {
            self.ledger.applied(i);
            Ok(Handled::Applied)
        } else {
            Ok(Handled::Duplicate)
        }
    }
}

#[async_trait]
impl BatchHandler for OrderHandler {
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError> {
        // Messages failing now are left out of the transaction and retried on their own.
        let mut results: Vec<Option<Result<Handled, HandlerError>>> = Vec::new();
        let mut take: Vec<(usize, &Incoming)> = Vec::with_capacity(batch.len());
        for m in batch {
            match index(m) {
                Ok(i) => match first_failure(m, &self.mix, i) {
                    Some(e) => results.push(Some(Err(e))),
                    None => {
                        results.push(None);
                        take.push((i, m));
                    }
                },
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let ids: Vec<MessageId> = take.iter().map(|(_, m)| m.envelope.id).collect();
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let fresh: std::collections::HashSet<MessageId> =
            inbox::claim_many(&mut tx, &self.prefix, CONSUMER, &ids)
                .await?
                .into_iter()
                .collect();
        // One row per key (a statement may not update a row twice), in key order (no
        // deadlocks between lanes).
        let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
        for (_, m) in &take {
            if fresh.contains(&m.envelope.id) {
                *counts.entry(m.envelope.aggregate.id.as_str()).or_default() += 1;
            }
        }
        add_effects(&mut tx, counts).await.map_err(map_error)?;
        commit(tx).await?;
        let mut taken = take.into_iter();
        Ok(results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    let (i, m) = taken.next().expect("one taken message per open slot");
                    if fresh.contains(&m.envelope.id) {
                        self.ledger.applied(i);
                        Ok(Handled::Applied)
                    } else {
                        Ok(Handled::Duplicate)
                    }
                })
            })
            .collect())
    }
}

/// What one postroom round measured.
#[derive(Debug)]
pub struct Round {
    /// From the first outbox write until every message to apply was applied.
    pub elapsed: Duration,
    /// Send-to-apply milliseconds of each applied message.
    pub latencies_ms: Vec<f64>,
    /// The consumer's counters (retries, parked).
    pub stats: StatsSnapshot,
}

/// The settings of postroom's consumers in this scenario.
fn consumer_config(concurrency: usize, ladder: &RetryLadder) -> ConsumerConfig {
    let mut cfg = super::super::handler::consumer_config(concurrency);
    cfg.retry = RetryPolicy {
        max_retries: 3,
        jitter: 0.0,
        ..RetryPolicy::with_ladder(ladder.clone())
    };
    // The failures are the workload's, one message in ten, not a dependency that is down.
    cfg.breaker.failure_threshold = 0;
    cfg
}

/// The shape of a postroom round.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Consumer mode.
    pub mode: Mode,
    /// Handlers (per message) or lanes (batched).
    pub concurrency: usize,
    /// Broker prefetch.
    pub prefetch: u16,
    /// Outbox rows per producer transaction and per relay claim; messages per batch.
    pub batch: usize,
    /// Body size.
    pub bytes: usize,
    /// The retry ladder (one stage).
    pub ladder: RetryLadder,
    /// The relay deletes each row once its publish is confirmed (`--retention 0s`) instead
    /// of marking it published.
    pub delete_published: bool,
}

/// One round: the producer writes the mix into the outbox while the relay and the consumer
/// run; done when every message to apply was applied.
pub async fn round(
    w: &Workload,
    store: &PgStore,
    mix: Mix,
    shape: &Shape,
) -> Result<Round, BenchError> {
    sqlx::query("TRUNCATE postroom_outbox")
        .execute(store.pool())
        .await
        .ctx("emptying the outbox")?;
    let messages = mix.messages(shape.bytes);
    let mut sub = w.subscriber(shape.prefetch)?;
    sub.attach().await.ctx("attaching the consumer")?;
    let ledger = Arc::new(Ledger::new(mix.n));
    let handler = Arc::new(OrderHandler {
        pool: store.pool().clone(),
        prefix: store.prefix().clone(),
        mix,
        ledger: ledger.clone(),
        mode: shape.mode,
        once: inbox::OnceEffect::new(store.prefix(), EFFECT_ONCE_SQL)
            .ctx("the handler's statement")?,
    });
    let cfg = consumer_config(shape.concurrency, &shape.ladder);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (consumer_task, stats) = match shape.mode {
        Mode::PerMessage | Mode::PerMessageTransaction => {
            let c = Consumer::new(cfg, handler);
            let stats = c.stats();
            let rx = stopped.clone();
            (tokio::spawn(async move { c.run(sub, rx).await }), stats)
        }
        Mode::Batched => {
            let batch = BatchConfig {
                max_size: shape.batch,
                linger: Duration::from_millis(5),
            };
            let c = BatchConsumer::new(cfg, batch, handler);
            let stats = c.stats();
            let rx = stopped.clone();
            (tokio::spawn(async move { c.run(sub, rx).await }), stats)
        }
    };
    let outbox = if shape.delete_published {
        store.outbox().delete_on_publish()
    } else {
        store.outbox()
    };
    let relay = OutboxRelay::new(
        Arc::new(outbox),
        w.publisher(),
        RelayConfig {
            relay_id: "bench-e2e".into(),
            batch_size: shape.batch,
            retention: None,
            ..RelayConfig::default()
        },
    );
    let relay_task = tokio::spawn(async move { relay.run(stopped).await });
    // The producer: `batch` outbox rows a transaction, as fast as the database takes them.
    let produced = async {
        for (k, chunk) in messages.chunks(shape.batch.max(1)).enumerate() {
            let from = k * shape.batch.max(1);
            let mut tx = store.begin().await.ctx("producer begin")?;
            ledger.sent(from..from + chunk.len());
            outbox::enqueue_batch(&mut tx, store.prefix(), chunk)
                .await
                .ctx("producer enqueue")?;
            commit(tx).await.ctx("producer commit")?;
        }
        Ok::<_, BenchError>(())
    };
    let outcome = async {
        produced.await?;
        let limit = crate::scenarios::timeout(mix.n) + shape.ladder.delays()[0] * 4;
        ledger
            .wait_applied(mix.applied_total(), limit, |done| {
                format!(
                    "e2e {:?}: {done} of {} applied",
                    shape.mode,
                    mix.applied_total()
                )
            })
            .await
    }
    .await;
    let _ = stop.send(true);
    let _ = consumer_task.await;
    let _ = relay_task.await;
    let elapsed = outcome?;
    Ok(Round {
        elapsed,
        latencies_ms: ledger.latencies_ms(),
        stats: stats.snapshot(),
    })
}
