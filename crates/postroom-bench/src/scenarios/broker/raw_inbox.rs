//! The raw baselines' side of the inbox: the transaction a careful engineer writes without
//! postroom (an inbox row, the business update when the row is new, commit), and the loop
//! that runs it for each delivery of a raw stream, `concurrency` at a time.

use crate::error::{BenchError, Context};
use crate::resources::pg::EFFECT_SQL;
use crate::resources::rabbit::CONSUMER;
use crate::scenarios::{rate, timeout};
use futures::{Stream, StreamExt};
use postroom_core::Envelope;
use sqlx::{Database, Encode, Executor, IntoArguments, PgPool, Transaction, Type};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// Claim `env`'s raw inbox row and, when it was new, apply the business update, in one
/// transaction; whether it was new.
pub async fn apply(pool: &PgPool, env: &Envelope) -> Result<bool, BenchError> {
    let mut tx = pool.begin().await.ctx("raw begin")?;
    let inserted = sqlx::query(
        "INSERT INTO raw_inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind(CONSUMER)
    .bind(env.id.as_uuid())
    .execute(&mut *tx)
    .await
    .ctx("raw inbox")?;
    effect_if_new(tx, inserted.rows_affected(), EFFECT_SQL, &env.aggregate.id).await
}

/// The rest of a raw inbox transaction `tx` whose inbox insert took `inserted` rows: when
/// the row was new, the business update `effect` of `aggregate`; then commit. Whether the
/// row was new.
pub async fn effect_if_new<DB>(
    mut tx: Transaction<'_, DB>,
    inserted: u64,
    effect: &str,
    aggregate: &str,
) -> Result<bool, BenchError>
where
    DB: Database,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let fresh = inserted == 1;
    if fresh {
        sqlx::query(effect)
            .bind(aggregate)
            .execute(&mut *tx)
            .await
            .ctx("raw effect")?;
    }
    tx.commit().await.ctx("raw commit")?;
    Ok(fresh)
}

/// Decode `body` and [`apply`] it.
pub async fn apply_body(pool: &PgPool, body: &[u8]) -> Result<(), BenchError> {
    let env: Envelope =
        serde_json::from_slice(body).map_err(|e| BenchError::Config(format!("raw decode: {e}")))?;
    apply(pool, &env).await.map(|_| ())
}

/// Take `n` deliveries from `deliveries`, each into a task of its own that applies its
/// `body` and then settles it with `ack`, at most `concurrency` at a time; messages per
/// second from the first pull until the last is settled.
pub async fn timed_per_delivery<D, F>(
    pool: &PgPool,
    n: usize,
    concurrency: usize,
    mut deliveries: impl Stream<Item = Result<D, BenchError>> + Unpin,
    body: fn(&D) -> &[u8],
    ack: fn(D) -> F,
) -> Result<f64, BenchError>
where
    D: Send + 'static,
    F: Future<Output = Result<(), BenchError>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(concurrency));
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout(n);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let permit = permits.clone().acquire_owned().await.expect("open");
        let d = tokio::time::timeout_at(deadline, deliveries.next())
            .await
            .map_err(|_| BenchError::Stalled("raw consumer stalled".into()))?
            .ok_or_else(|| BenchError::Stalled("raw consumer's stream ended".into()))??;
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            apply_body(&pool, body(&d)).await?;
            ack(d).await?;
            drop(permit);
            Ok::<_, BenchError>(())
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("raw task: {e}")))??;
    }
    Ok(rate(n, started.elapsed()))
}
