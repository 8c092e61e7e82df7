//! Scenario 7, embedded relay: `OutboxRelay` from the SQLite outbox into the embedded queue
//! (both in one SQLite file, WAL, synchronous=FULL), beside raw SQLite transactions of the same
//! shape on raw tables in the same file: claim a batch with a lease, insert the batch into a
//! queue table, mark it published. Target ≥ 90 %.

use super::rate;
use crate::Ctx;
use crate::error::{BenchError, Context};
use crate::payload::{self, median};
use crate::report::{Load, Measurement, Target};
use crate::resources::rabbit::{BINDING, CONSUMER};
use postroom_core::{OutboxRelay, OutboxStore, OutgoingMessage, RelayConfig};
use postroom_sqlite::{SqliteStore, outbox};
use sqlx::{Row, SqliteConnection};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Raw tables beside postroom's, in the same file.
pub const RAW_DDL: &str = "
CREATE TABLE IF NOT EXISTS raw_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL UNIQUE,
    route TEXT NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL, aggregate_key TEXT NOT NULL,
    locked_by TEXT, locked_until INTEGER, published_at INTEGER);
CREATE INDEX IF NOT EXISTS raw_outbox_unpublished ON raw_outbox (seq) WHERE published_at IS NULL;
CREATE TABLE IF NOT EXISTS raw_queue (seq INTEGER PRIMARY KEY AUTOINCREMENT, consumer TEXT NOT NULL,
    message_id TEXT, routing_key TEXT NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL,
    visible_at INTEGER NOT NULL, lease_token TEXT, leased_until INTEGER);
CREATE INDEX IF NOT EXISTS raw_queue_ready ON raw_queue (consumer, visible_at, seq);
CREATE TABLE IF NOT EXISTS raw_inbox (consumer TEXT NOT NULL, message_id TEXT NOT NULL,
    processed_at INTEGER NOT NULL, PRIMARY KEY (consumer, message_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bench_effects (key TEXT PRIMARY KEY, n INTEGER NOT NULL);";

/// Open a store in a fresh temporary directory, with the raw tables.
pub async fn open() -> Result<(tempfile::TempDir, SqliteStore), BenchError> {
    let dir = tempfile::tempdir().ctx("temporary directory")?;
    let store = SqliteStore::open(dir.path().join("bench.db"))
        .await
        .ctx("opening the SQLite store")?;
    sqlx::raw_sql(RAW_DDL)
        .execute(store.pool())
        .await
        .ctx("raw tables")?;
    store
        .queue()
        .bind(CONSUMER, &[BINDING])
        .await
        .ctx("binding the consumer")?;
    Ok((dir, store))
}

/// Open a store in a fresh file ([`open`]) and run the pair `ours` and `raw` of `round` on it
/// `rounds` times ([`super::alternate`]); each side's rates.
pub async fn alternate_on_a_fresh_file<R: Copy>(
    rounds: usize,
    round: R,
    ours: impl AsyncFn(&SqliteStore, R) -> Result<f64, BenchError>,
    raw: impl AsyncFn(&SqliteStore, R) -> Result<f64, BenchError>,
) -> Result<(Vec<f64>, Vec<f64>), BenchError> {
    let (_dir, store) = open().await?;
    let rates = super::alternate(
        rounds,
        async || ours(&store, round).await,
        async || raw(&store, round).await,
    )
    .await?;
    store.pool().close().await;
    Ok(rates)
}

/// The measurement `name` of an embedded scenario: the medians (msg/s) of postroom's rounds
/// and the raw ones, which do what `baseline` says, with the rounds attached.
pub fn measurement(
    name: &str,
    baseline: &str,
    target: Target,
    load: Load,
    (ours, raw): (Vec<f64>, Vec<f64>),
) -> Measurement {
    Measurement::new(
        name,
        "embedded",
        "msg/s",
        median(&ours),
        median(&raw),
        baseline,
        target,
        load,
    )
    .detail("postroom_rounds", &ours)
    .detail("raw_rounds", &raw)
}

/// Milliseconds since the epoch.
#[must_use]
pub fn now_ms() -> i64 {
    chrono_ms(std::time::SystemTime::now())
}

fn chrono_ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The shape of one round, the same on both sides: messages, the relay's batch and body
/// size.
#[derive(Clone, Copy)]
struct Round {
    n: usize,
    batch: usize,
    bytes: usize,
}

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let a = &ctx.args;
    let (n, batch) = (a.messages(), usize::from(a.batch));
    let round = Round {
        n,
        batch,
        bytes: a.payload_bytes,
    };
    let rounds = alternate_on_a_fresh_file(a.rounds(), round, postroom_round, raw_round).await?;
    Ok(measurement(
        "embedded_relay_sqlite",
        "raw SQLite claim / insert / mark transactions in the same file",
        Target::at_least(0.9),
        Load::new(a.payload_bytes, 1, 0, batch, n),
        rounds,
    ))
}

async fn postroom_round(store: &SqliteStore, round: Round) -> Result<f64, BenchError> {
    let Round { n, batch, bytes } = round;
    let tables = "DELETE FROM postroom_outbox; DELETE FROM postroom_queue;";
    refill(store, tables, n, bytes, async |tx, m| {
        outbox::enqueue(tx, m).await.ctx("enqueue")
    })
    .await?;
    let cfg = RelayConfig {
        relay_id: "bench".into(),
        batch_size: batch,
        retention: None,
        ..RelayConfig::default()
    };
    let relay = OutboxRelay::new(Arc::new(store.clone()), Arc::new(store.queue()), cfg);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    // The loop users run: pipelined (publish n while marking n-1 and claiming n+1).
    let task = tokio::spawn(async move { relay.run(rx).await });
    while store.pending().await.ctx("pending")? > 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let per_sec = rate(n, started.elapsed());
    let _ = stop.send(true);
    task.await
        .map_err(|e| BenchError::Stalled(format!("relay task: {e}")))?;
    check(store, "SELECT COUNT(*) FROM postroom_queue", n).await?;
    Ok(per_sec)
}

async fn raw_round(store: &SqliteStore, round: Round) -> Result<f64, BenchError> {
    let Round { n, batch, bytes } = round;
    let tables = "DELETE FROM raw_outbox; DELETE FROM raw_queue;";
    refill(store, tables, n, bytes, async |tx, m| {
        sqlx::query("INSERT INTO raw_outbox (message_id, route, headers, body, aggregate_key) VALUES (?, ?, ?, ?, ?)")
            .bind(m.id.to_string())
            .bind(m.route.as_str())
            .bind(serde_json::to_string(&m.headers).unwrap_or_default())
            .bind(&m.body)
            .bind(m.aggregate_key())
            .execute(tx)
            .await
            .ctx("raw fill")
            .map(|_| ())
    })
    .await?;
    let started = Instant::now();
    loop {
        let now = now_ms();
        let mut tx = store.begin().await.ctx("raw claim begin")?;
        let rows = sqlx::query(
            "UPDATE raw_outbox SET locked_by = 'raw', locked_until = ?1
             WHERE seq IN (SELECT seq FROM raw_outbox WHERE published_at IS NULL
                           AND (locked_until IS NULL OR locked_until < ?2) ORDER BY seq LIMIT ?3)
             RETURNING seq, message_id, route, headers, body",
        )
        .bind(now + Duration::from_secs(30).as_millis() as i64)
        .bind(now)
        .bind(batch as i64)
        .fetch_all(&mut *tx)
        .await
        .ctx("raw claim")?;
        tx.commit().await.ctx("raw claim commit")?;
        if rows.is_empty() {
            break;
        }
        let mut tx = store.begin().await.ctx("raw publish begin")?;
        let mut seqs = Vec::with_capacity(rows.len());
        for r in &rows {
            seqs.push(r.get::<i64, _>("seq"));
            sqlx::query("INSERT INTO raw_queue (consumer, message_id, routing_key, headers, body, visible_at) VALUES (?, ?, ?, ?, ?, ?)")
                .bind(CONSUMER)
                .bind(r.get::<String, _>("message_id"))
                .bind(r.get::<String, _>("route"))
                .bind(r.get::<String, _>("headers"))
                .bind(r.get::<Vec<u8>, _>("body"))
                .bind(now)
                .execute(&mut *tx)
                .await
                .ctx("raw publish")?;
        }
        tx.commit().await.ctx("raw publish commit")?;
        let mut tx = store.begin().await.ctx("raw mark begin")?;
        sqlx::query(
            "UPDATE raw_outbox SET published_at = ?, locked_by = NULL, locked_until = NULL
             WHERE seq IN (SELECT value FROM json_each(?))",
        )
        .bind(now_ms())
        .bind(serde_json::to_string(&seqs).unwrap_or_default())
        .execute(&mut *tx)
        .await
        .ctx("raw mark")?;
        tx.commit().await.ctx("raw mark commit")?;
    }
    let per_sec = rate(n, started.elapsed());
    check(store, "SELECT COUNT(*) FROM raw_queue", n).await?;
    Ok(per_sec)
}

/// Empty the tables `deletes` deletes from, then write `n` messages of `bytes` bytes with
/// [`fill`].
async fn refill(
    store: &SqliteStore,
    deletes: &str,
    n: usize,
    bytes: usize,
    write: impl AsyncFnMut(&mut SqliteConnection, &OutgoingMessage) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    sqlx::raw_sql(deletes)
        .execute(store.pool())
        .await
        .ctx("emptying")?;
    fill(store, &payload::messages(0, n, bytes), write).await
}

/// Write `msgs` into `store` with `write`, a transaction for every thousand.
pub async fn fill(
    store: &SqliteStore,
    msgs: &[OutgoingMessage],
    mut write: impl AsyncFnMut(&mut SqliteConnection, &OutgoingMessage) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    for chunk in msgs.chunks(1000) {
        let mut tx = store.begin().await.ctx("begin")?;
        for m in chunk {
            write(&mut tx, m).await?;
        }
        tx.commit().await.ctx("commit")?;
    }
    Ok(())
}

/// An error unless `count`, the count of a queue table, finds all `n` messages there.
async fn check(store: &SqliteStore, count: &str, n: usize) -> Result<(), BenchError> {
    let got: i64 = sqlx::query_scalar(count)
        .fetch_one(store.pool())
        .await
        .ctx("count")?;
    if usize::try_from(got).unwrap_or(0) == n {
        Ok(())
    } else {
        Err(BenchError::Stalled(format!("{got} of {n} messages queued")))
    }
}
