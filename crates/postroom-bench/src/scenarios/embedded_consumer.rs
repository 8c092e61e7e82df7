//! Scenario 7, embedded consumer: postroom's `Consumer` on the embedded SQLite queue with a
//! handler that claims the inbox row and bumps a counter in one transaction, beside raw SQLite
//! transactions of the same shape (lease a batch, one transaction per message, delete the
//! queue row as the ack), at the same concurrency and prefetch. Target ≥ 80 %.

use super::broker::raw_inbox::effect_if_new;
use super::embedded_relay::{alternate_on_a_fresh_file, fill, measurement, now_ms};
use super::handler::{Progress, timed_consumer};
use super::rate;
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::payload;
use crate::report::{Load, Measurement, Target};
use crate::resources::rabbit::CONSUMER;
use postroom_core::{
    Envelope, Handled, Handler, HandlerError, Incoming, OutgoingMessage, Publisher, async_trait,
};
use postroom_sqlite::{SqliteQueue, SqliteStore, inbox};
use sqlx::Row;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

const EFFECT: &str =
    "INSERT INTO bench_effects (key, n) VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1";
const POLL: Duration = Duration::from_millis(20);

/// The shape of one round, the same on both sides: messages, handlers at once, prefetch and
/// body size.
#[derive(Clone, Copy)]
struct Round {
    n: usize,
    conc: usize,
    prefetch: usize,
    bytes: usize,
}

impl Round {
    /// The round's messages.
    fn messages(&self) -> Vec<OutgoingMessage> {
        payload::messages(0, self.n, self.bytes)
    }
}

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let (n, conc, prefetch) = (
        a.messages(),
        usize::from(a.concurrency),
        usize::from(a.prefetch),
    );
    let round = Round {
        n,
        conc,
        prefetch,
        bytes: a.payload_bytes,
    };
    let rounds = alternate_on_a_fresh_file(a.rounds(), round, postroom_round, raw_round).await?;
    Ok(measurement(
        "embedded_consumer_sqlite",
        "raw SQLite lease / transaction / delete in the same file, same concurrency",
        Target::at_least(0.8),
        Load::new(a.payload_bytes, conc, prefetch, 1, n),
        rounds,
    ))
}

struct SqliteInboxHandler {
    store: SqliteStore,
    progress: Arc<Progress>,
}

#[async_trait]
impl Handler for SqliteInboxHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let map = postroom_sqlite::map_error;
        let mut tx = self.store.begin().await?;
        let fresh = inbox::claim(&mut tx, CONSUMER, m.envelope.id).await?;
        if fresh {
            sqlx::query(EFFECT)
                .bind(&m.envelope.aggregate.id)
                .execute(&mut *tx)
                .await
                .map_err(map)?;
        }
        tx.commit().await.map_err(map)?;
        self.progress.tick();
        Ok(if fresh {
            Handled::Applied
        } else {
            Handled::Duplicate
        })
    }
}

async fn postroom_round(store: &SqliteStore, round: Round) -> Result<f64, BenchError> {
    let queue = store.queue();
    for chunk in round.messages().chunks(1000) {
        for r in queue.publish_batch(chunk).await {
            r.ctx("filling the embedded queue")?;
        }
    }
    let progress = Arc::new(Progress::default());
    let handler = Arc::new(SqliteInboxHandler {
        store: store.clone(),
        progress: progress.clone(),
    });
    let queue = store
        .queue_with(
            SqliteQueue::defaults()
                .prefetch(round.prefetch)
                .poll_interval(POLL),
        )
        .ctx("queue")?;
    let sub = queue
        .subscribe(CONSUMER, &[crate::resources::rabbit::BINDING])
        .await
        .ctx("subscribe")?;
    timed_consumer(
        handler,
        round.conc,
        sub,
        &progress,
        round.n,
        "embedded consumer",
    )
    .await
}

async fn raw_round(store: &SqliteStore, round: Round) -> Result<f64, BenchError> {
    fill(store, &round.messages(), async |tx, m| {
        sqlx::query("INSERT INTO raw_queue (consumer, message_id, routing_key, headers, body, visible_at) VALUES (?, ?, ?, ?, ?, ?)")
            .bind(CONSUMER)
            .bind(m.id.to_string())
            .bind(m.route.as_str())
            .bind(serde_json::to_string(&m.headers).unwrap_or_default())
            .bind(&m.body)
            .bind(now_ms())
            .execute(tx)
            .await
            .ctx("raw fill")
            .map(|_| ())
    })
    .await?;
    let permits = Arc::new(Semaphore::new(round.conc));
    let started = Instant::now();
    let deadline = Instant::now() + super::timeout(round.n);
    let mut tasks = Vec::with_capacity(round.n);
    let mut taken = 0;
    while taken < round.n {
        if Instant::now() > deadline {
            return Err(BenchError::Stalled(format!(
                "raw took {taken} of {}",
                round.n
            )));
        }
        let permit = permits.clone().acquire_owned().await.expect("open");
        let now = now_ms();
        let token = uuid::Uuid::now_v7().to_string();
        let mut tx = store.begin().await.ctx("raw lease begin")?;
        let rows = sqlx::query(
            "UPDATE raw_queue SET lease_token = ?1, leased_until = ?2
             WHERE seq IN (SELECT seq FROM raw_queue WHERE consumer = ?3 AND visible_at <= ?4
                           AND (leased_until IS NULL OR leased_until < ?4) ORDER BY visible_at, seq LIMIT ?5)
             RETURNING seq, body",
        )
        .bind(&token)
        .bind(now + 30_000)
        .bind(CONSUMER)
        .bind(now)
        .bind(round.prefetch as i64)
        .fetch_all(&mut *tx)
        .await
        .ctx("raw lease")?;
        tx.commit().await.ctx("raw lease commit")?;
        if rows.is_empty() {
            drop(permit);
            tokio::time::sleep(POLL).await;
            continue;
        }
        // The first row uses the permit taken above; the others take their own.
        let mut permit = Some(permit);
        for row in rows {
            let p = match permit.take() {
                Some(p) => p,
                None => permits.clone().acquire_owned().await.expect("open"),
            };
            taken += 1;
            let (store, token) = (store.clone(), token.clone());
            let seq: i64 = row.get("seq");
            let body: Vec<u8> = row.get("body");
            tasks.push(tokio::spawn(async move {
                let r = raw_handle(&store, seq, &token, &body).await;
                drop(p);
                r
            }));
        }
    }
    for t in tasks {
        t.await
            .map_err(|e| BenchError::Stalled(format!("raw task: {e}")))??;
    }
    Ok(rate(round.n, started.elapsed()))
}

async fn raw_handle(
    store: &SqliteStore,
    seq: i64,
    token: &str,
    body: &[u8],
) -> Result<(), BenchError> {
    let env: Envelope =
        serde_json::from_slice(body).map_err(|e| BenchError::Config(format!("decode: {e}")))?;
    let mut tx = store.begin().await.ctx("raw begin")?;
    let inserted = sqlx::query(
        "INSERT OR IGNORE INTO raw_inbox (consumer, message_id, processed_at) VALUES (?, ?, ?)",
    )
    .bind(CONSUMER)
    .bind(env.id.to_string())
    .bind(now_ms())
    .execute(&mut *tx)
    .await
    .ctx("raw inbox")?;
    effect_if_new(tx, inserted.rows_affected(), EFFECT, &env.aggregate.id).await?;
    sqlx::query("DELETE FROM raw_queue WHERE seq = ? AND lease_token = ?")
        .bind(seq)
        .bind(token)
        .execute(store.pool())
        .await
        .ctx("raw ack")?;
    Ok(())
}
