//! `pg-produce`: `conns` producers writing outbox rows 100 per transaction
//! (`outbox::enqueue_batch`) beside one per transaction (`outbox::enqueue`). Target ≥ 3×.

use super::{Figure, at_each_connection_count, messages, run_workers, timed};
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::report::{Measurement, Target};
use postroom_core::OutgoingMessage;
use postroom_postgres::{PgStore, commit, outbox};
use std::sync::Arc;
use std::time::Instant;

/// Rows per transaction of the batched side.
const BATCH: usize = 100;

/// Both sides at 1 and 8 connections.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let msgs = Arc::new(messages(ctx, ctx.args.messages()));
    let figure = Figure {
        name: "pg_produce_batched",
        scenario: "pg-produce",
        target: Target::at_least(3.0),
        baseline: "one outbox row per transaction",
        prefetch: 0,
        batch: BATCH,
    };
    at_each_connection_count(ctx, figure, async |store, conns| {
        let single = round(store, conns, &msgs, 1).await?;
        let batched = round(store, conns, &msgs, BATCH).await?;
        Ok((vec![batched], vec![single]))
    })
    .await
}

/// `conns` producers, each writing its share `per_tx` rows per transaction.
async fn round(
    store: &PgStore,
    conns: u32,
    msgs: &Arc<Vec<OutgoingMessage>>,
    per_tx: usize,
) -> Result<f64, BenchError> {
    let started = Instant::now();
    run_workers(conns, |w| {
        let (store, msgs) = (store.clone(), msgs.clone());
        async move {
            let mine: Vec<_> = msgs
                .iter()
                .skip(w as usize)
                .step_by(conns as usize)
                .cloned()
                .collect();
            for chunk in mine.chunks(per_tx) {
                let mut tx = store.begin().await.ctx("begin")?;
                if let [m] = chunk {
                    outbox::enqueue(&mut tx, store.prefix(), m)
                        .await
                        .ctx("enqueue")?;
                } else {
                    outbox::enqueue_batch(&mut tx, store.prefix(), chunk)
                        .await
                        .ctx("enqueue_batch")?;
                }
                commit(tx).await.ctx("commit")?;
            }
            Ok(())
        }
    })
    .await?;
    let per_sec = timed(
        &format!("pg-produce {per_tx} per tx"),
        conns,
        msgs.len(),
        started,
    );
    sqlx::query("TRUNCATE postroom_outbox")
        .execute(store.pool())
        .await
        .ctx("emptying the outbox")?;
    Ok(per_sec)
}
