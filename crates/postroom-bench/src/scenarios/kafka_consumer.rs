//! Kafka consumer with inbox: topic → handler → inbox row + business update in one PostgreSQL
//! transaction → offset stored, postroom's `Consumer` on its Kafka subscriber (offset
//! tracker, delivery ledger) beside a raw rdkafka loop at the same concurrency: poll up to
//! `concurrency` records, run their transactions at once, commit the offset after the last.
//! Each round on fresh topics and groups; timed from the first record handled, so that the
//! group join (seconds on some brokers) counts on neither side. Target ≥ 80 %.

use super::handler::{InboxHandler, Progress, consumer_config};
use super::rate;
use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::kafka::Workload;
use crate::resources::pg::EFFECT_SQL;
use crate::resources::rabbit::CONSUMER;
use crate::{Ctx, PG_FSYNC_NOTE};
use postroom_core::{Consumer, Envelope};
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer as _, StreamConsumer};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Instant;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let (n, conc, prefetch) = (a.messages(), usize::from(a.concurrency), a.prefetch);
    let pool = ctx
        .db()?
        .store(u32::from(a.concurrency))
        .await?
        .pool()
        .clone();
    let (ours, raw) = super::alternate(
        a.rounds(),
        async || {
            let w = filled(ctx, n).await?;
            let r = postroom_round(&w, &pool, n, conc, prefetch).await;
            w.delete().await?;
            r
        },
        async || {
            let w = filled(ctx, n).await?;
            let r = raw_round(&w, &pool, n, conc).await;
            w.delete().await?;
            r
        },
    )
    .await?;
    pool.close().await;
    let load = Load::new(a.payload_bytes, conc, usize::from(prefetch), 1, n);
    Ok(Measurement::new(
        "consumer_inbox_pg_kafka",
        "consumer",
        "msg/s",
        median(&ours),
        median(&raw),
        "raw rdkafka poll + sqlx transactions + offset commit, same concurrency",
        Target::at_least(0.8),
        load,
    )
    .detail("postroom_rounds", &ours)
    .detail("raw_rounds", &raw)
    .note(PG_FSYNC_NOTE))
}

/// Fresh topics holding `n` fresh messages.
async fn filled(ctx: &Ctx, n: usize) -> Result<Workload, BenchError> {
    let w = Workload::create(&ctx.endpoints, "consumer").await?;
    w.bind(ctx.args.prefetch).await?;
    let producer = w.raw_producer()?;
    w.raw_publish(
        &producer,
        &payload::outgoing(0, n, ctx.args.payload_bytes),
        1000,
    )
    .await?;
    Ok(w)
}

/// Messages per second from the first handled to the `n`-th.
async fn timed(progress: &Progress, n: usize, who: &str) -> Result<f64, BenchError> {
    let limit = super::consumer::timeout(n);
    if !progress.wait_for(1, limit).await {
        return Err(BenchError::Stalled(format!("{who} handled nothing")));
    }
    let (started, first) = (Instant::now(), progress.done());
    if !progress.wait_for(n, limit).await {
        return Err(BenchError::Stalled(format!(
            "{who} handled {} of {n}",
            progress.done()
        )));
    }
    Ok(rate(n - first, started.elapsed()))
}

/// Time postroom's consumer until it handled `n` messages.
async fn postroom_round(
    w: &Workload,
    pool: &PgPool,
    n: usize,
    conc: usize,
    prefetch: u16,
) -> Result<f64, BenchError> {
    let progress = Arc::new(Progress::default());
    let handler = Arc::new(InboxHandler::new(pool.clone(), progress.clone()));
    let consumer = Consumer::for_transport(
        consumer_config(conc),
        handler,
        &postroom_core::Transport::capabilities(&w.transport),
    )
    .ctx("consumer settings")?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sub = w.subscription(prefetch);
    let run = consumer.run_on(&w.transport, &sub, stopped);
    let (ran, per_sec) = tokio::join!(run, async {
        let r = timed(&progress, n, "postroom consumer").await;
        let _ = stop.send(true);
        r
    });
    ran.ctx("postroom consumer")?;
    per_sec
}

/// Time the raw loop until it handled `n` messages.
async fn raw_round(w: &Workload, pool: &PgPool, n: usize, conc: usize) -> Result<f64, BenchError> {
    let mut c = w.config.client_config();
    c.set("group.id", format!("{}.raw", w.prefix))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    let consumer: StreamConsumer = c
        .create()
        .map_err(|e| BenchError::Config(format!("raw Kafka consumer: {e}")))?;
    consumer
        .subscribe(&[&w.topic()])
        .map_err(|e| BenchError::Stalled(format!("raw subscribe: {e}")))?;
    let progress = Progress::default();
    let work = async {
        let mut done = 0;
        while done < n {
            let mut batch = Vec::with_capacity(conc);
            let first = consumer
                .recv()
                .await
                .map_err(|e| BenchError::Stalled(format!("raw poll: {e}")))?;
            batch.push(first.detach());
            while batch.len() < conc.min(n - done) {
                match tokio::time::timeout(std::time::Duration::ZERO, consumer.recv()).await {
                    Ok(Ok(m)) => batch.push(m.detach()),
                    Ok(Err(e)) => return Err(BenchError::Stalled(format!("raw poll: {e}"))),
                    Err(_) => break,
                }
            }
            let txs = batch
                .iter()
                .map(|m| raw_tx(pool, m.payload().unwrap_or_default()));
            for r in futures::future::join_all(txs).await {
                r?;
            }
            let last = batch.last().expect("one record at least");
            let mut tpl = rdkafka::TopicPartitionList::new();
            tpl.add_partition_offset(
                last.topic(),
                last.partition(),
                rdkafka::Offset::Offset(last.offset() + 1),
            )
            .map_err(|e| BenchError::Stalled(format!("raw offset: {e}")))?;
            consumer
                .commit(&tpl, CommitMode::Async)
                .map_err(|e| BenchError::Stalled(format!("raw commit: {e}")))?;
            done += batch.len();
            progress.add(batch.len());
        }
        Ok::<_, BenchError>(())
    };
    let (worked, per_sec) = tokio::join!(work, timed(&progress, n, "raw consumer"));
    worked?;
    per_sec
}

/// The raw transaction of one record: inbox row, business update when fresh.
async fn raw_tx(pool: &PgPool, body: &[u8]) -> Result<(), BenchError> {
    let env: Envelope =
        serde_json::from_slice(body).map_err(|e| BenchError::Config(format!("raw decode: {e}")))?;
    let mut tx = pool.begin().await.ctx("raw begin")?;
    let fresh = sqlx::query(
        "INSERT INTO raw_inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind(CONSUMER)
    .bind(env.id.as_uuid())
    .execute(&mut *tx)
    .await
    .ctx("raw inbox")?
    .rows_affected()
        == 1;
    if fresh {
        sqlx::query(EFFECT_SQL)
            .bind(&env.aggregate.id)
            .execute(&mut *tx)
            .await
            .ctx("raw effect")?;
    }
    tx.commit().await.ctx("raw commit")?;
    Ok(())
}
