//! `pg-produce`: `conns` producers writing outbox rows 100 per transaction
//! (`outbox::enqueue_batch`) beside one per transaction (`outbox::enqueue`). Target ≥ 3×.

use super::{CONNECTIONS, join_all, measurement, messages, store, timed};
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::report::{Load, Measurement, Target};
use postroom_core::OutgoingMessage;
use postroom_postgres::{PgStore, commit, outbox};
use std::sync::Arc;
use std::time::Instant;

/// Rows per transaction of the batched side.
const BATCH: usize = 100;

/// Both sides at 1 and 8 connections.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let n = ctx.args.messages();
    let msgs = Arc::new(messages(ctx, n));
    let mut out = Vec::new();
    for conns in CONNECTIONS {
        let store = store(ctx, conns).await?;
        let single = round(&store, conns, &msgs, 1).await?;
        let batched = round(&store, conns, &msgs, BATCH).await?;
        store.pool().close().await;
        let load = Load::new(ctx.args.payload_bytes, conns as usize, 0, BATCH, n);
        out.push(measurement(
            ctx,
            "pg_produce_batched",
            "pg-produce",
            conns,
            &[batched],
            &[single],
            "one outbox row per transaction",
            Target::at_least(3.0),
            load,
        ));
    }
    Ok(out)
}

/// `conns` producers, each writing its share `per_tx` rows per transaction.
async fn round(
    store: &PgStore,
    conns: u32,
    msgs: &Arc<Vec<OutgoingMessage>>,
    per_tx: usize,
) -> Result<f64, BenchError> {
    let started = Instant::now();
    let tasks = (0..conns as usize)
        .map(|w| {
            let (store, msgs) = (store.clone(), msgs.clone());
            tokio::spawn(async move {
                let mine: Vec<_> = msgs
                    .iter()
                    .skip(w)
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
            })
        })
        .collect();
    join_all(tasks).await?;
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
