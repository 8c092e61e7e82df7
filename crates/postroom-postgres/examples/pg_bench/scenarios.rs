//! The measured scenarios, each postroom beside the same work done with raw SQL.

use crate::Measure;
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::{
    Envelope, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming, OutboxRelay, OutboxStore,
    OutgoingMessage, Publisher, RelayConfig, async_trait,
};
use postroom_postgres::{PgStore, QueueConfig, TablePrefix, commit, inbox, map_error, outbox};
use sqlx::postgres::PgPoolOptions;
use sqlx::types::Json;
use sqlx::{PgPool, Row};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const RAW_CLAIM: &str = "WITH c AS (SELECT seq FROM raw_outbox WHERE published_at IS NULL
        AND (locked_until IS NULL OR locked_until < now()) ORDER BY seq LIMIT 100 FOR UPDATE SKIP LOCKED)
    UPDATE raw_outbox o SET locked_by = $1, locked_until = now() + interval '30 seconds' FROM c WHERE o.seq = c.seq
    RETURNING o.id, o.route, o.headers, o.body, o.aggregate_key";

pub async fn server_settings(url: &str) -> String {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect");
    let mut out = Vec::new();
    for s in [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "shared_buffers",
    ] {
        let v: String = sqlx::query_scalar(&format!("SHOW {s}"))
            .fetch_one(&pool)
            .await
            .unwrap_or_default();
        out.push(format!("{s}={v}"));
    }
    out.join(" ")
}

async fn store(url: &str, conns: u32) -> PgStore {
    let pool = PgPoolOptions::new()
        .max_connections(conns)
        .connect(url)
        .await
        .expect("connect");
    let store = PgStore::from_pool(pool, TablePrefix::default());
    store.migrate().await.expect("migrate");
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS effects (consumer TEXT, key TEXT, n BIGINT NOT NULL, PRIMARY KEY (consumer, key));
         CREATE TABLE IF NOT EXISTS raw_outbox (seq BIGSERIAL PRIMARY KEY, id UUID NOT NULL UNIQUE, aggregate_key TEXT NOT NULL,
             route TEXT NOT NULL, headers JSONB NOT NULL, body BYTEA NOT NULL, locked_by TEXT, locked_until TIMESTAMPTZ,
             published_at TIMESTAMPTZ);
         CREATE INDEX IF NOT EXISTS raw_outbox_unpublished ON raw_outbox (seq) WHERE published_at IS NULL;
         TRUNCATE effects, raw_outbox, postroom_outbox, postroom_inbox, postroom_queue;",
    )
    .execute(store.pool())
    .await
    .expect("bench tables");
    store
}

/// Distinct aggregates the messages are spread over, round robin (`PG_BENCH_AGGREGATES`,
/// default 1000): fewer aggregates mean more of the relays' claims wait behind heads another
/// relay holds.
fn aggregates() -> usize {
    std::env::var("PG_BENCH_AGGREGATES")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1000)
}

fn message(i: usize) -> (OutgoingMessage, String) {
    let env = Envelope::builder("order.created", "bench")
        .aggregate(
            "order",
            format!("a{}", i % aggregates()),
            (i / aggregates()) as u64 + 1,
        )
        .data(serde_json::json!({"sku": "A-1", "qty": 1, "i": i}))
        .build();
    (
        OutgoingMessage::from_envelope(&env, "order.created"),
        env.aggregate.key(),
    )
}

/// A chunk of messages as the arrays an `unnest` INSERT binds.
struct Columns {
    ids: Vec<uuid::Uuid>,
    keys: Vec<String>,
    routes: Vec<String>,
    headers: Vec<Json<postroom_core::Headers>>,
    bodies: Vec<Vec<u8>>,
}

impl Columns {
    fn of(chunk: &[(OutgoingMessage, String)]) -> Self {
        Self {
            ids: chunk.iter().map(|(m, _)| m.id.as_uuid()).collect(),
            keys: chunk.iter().map(|(_, k)| k.clone()).collect(),
            routes: chunk
                .iter()
                .map(|(m, _)| m.route.as_str().to_string())
                .collect(),
            headers: chunk.iter().map(|(m, _)| Json(m.headers.clone())).collect(),
            bodies: chunk.iter().map(|(m, _)| m.body.clone()).collect(),
        }
    }
}

fn measure(
    scenario: &'static str,
    variant: &'static str,
    connections: u32,
    messages: usize,
    started: Instant,
) -> Measure {
    let seconds = started.elapsed().as_secs_f64();
    let m = Measure {
        scenario,
        variant,
        connections,
        messages,
        seconds,
        per_sec: messages as f64 / seconds,
    };
    eprintln!(
        "{scenario:<10} {variant:<22} conns={connections} {:.0} msg/s",
        m.per_sec
    );
    m
}

async fn join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        t.await.expect("bench task");
    }
}

/// A publisher whose broker confirms at once; it counts what it confirmed.
#[derive(Default)]
struct Confirming {
    confirmed: AtomicUsize,
}

#[async_trait]
impl Publisher for Confirming {
    async fn publish(&self, _: &OutgoingMessage) -> postroom_core::Result<()> {
        self.confirmed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The relay scenario: `rounds` pairs, alternating which side goes first, after a pair that
/// is not counted (connections opened, statements prepared and planned, tables cached).
pub async fn relay(url: &str, conns: u32, n: usize, rounds: usize) -> Vec<Measure> {
    let store = store(url, conns).await;
    let msgs: Vec<_> = (0..n).map(message).collect();
    let warm_up = &msgs[..n.min(2000)];
    relay_postroom(&store, conns, warm_up).await;
    relay_raw(&store, conns, warm_up).await;
    let mut out = Vec::new();
    for round in 0..rounds {
        if round % 2 == 0 {
            out.push(relay_postroom(&store, conns, &msgs).await);
            out.push(relay_raw(&store, conns, &msgs).await);
        } else {
            out.push(relay_raw(&store, conns, &msgs).await);
            out.push(relay_postroom(&store, conns, &msgs).await);
        }
    }
    out
}

/// `conns` relays running the loop users run (`OutboxRelay::run`: publish batch n while
/// marking n-1 and claiming n+1) into a publisher that confirms at once; done when every row
/// is confirmed and marked.
async fn relay_postroom(
    store: &PgStore,
    conns: u32,
    msgs: &[(OutgoingMessage, String)],
) -> Measure {
    let n = msgs.len();
    sqlx::query("TRUNCATE postroom_outbox")
        .execute(store.pool())
        .await
        .unwrap();
    let mut tx = store.begin().await.unwrap();
    for chunk in msgs.chunks(500) {
        outbox::enqueue_batch(&mut tx, store.prefix(), chunk)
            .await
            .unwrap();
    }
    commit(tx).await.unwrap();
    // A production outbox has planner statistics; give the fresh table some too.
    sqlx::query("ANALYZE postroom_outbox")
        .execute(store.pool())
        .await
        .unwrap();
    let ob: Arc<dyn OutboxStore> = Arc::new(store.outbox());
    let publisher = Arc::new(Confirming::default());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let tasks: Vec<_> = (0..conns)
        .map(|i| {
            let cfg = RelayConfig {
                relay_id: format!("bench-{i}"),
                batch_size: 100,
                retention: None,
                idle_wait: Duration::from_millis(
                    std::env::var("IDLE_MS")
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(500),
                ),
                ..RelayConfig::default()
            };
            let relay = OutboxRelay::new(ob.clone(), publisher.clone(), cfg);
            let rx = stop_rx.clone();
            tokio::spawn(async move { relay.run(rx).await })
        })
        .collect();
    // Counted in the publisher, so that finding the end costs the database nothing.
    while publisher.confirmed.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    while ob.pending().await.unwrap() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let m = measure("relay", "postroom", conns, n, started);
    let _ = stop.send(true);
    join_all(tasks).await;
    m
}

/// The same claim-with-lease UPDATE and mark UPDATE, raw: no per-aggregate order, no relay
/// loop, no pipeline.
async fn relay_raw(store: &PgStore, conns: u32, msgs: &[(OutgoingMessage, String)]) -> Measure {
    let n = msgs.len();
    let pool = store.pool().clone();
    sqlx::query("TRUNCATE raw_outbox")
        .execute(&pool)
        .await
        .unwrap();
    for chunk in msgs.chunks(500) {
        let c = Columns::of(chunk);
        sqlx::query(
            "INSERT INTO raw_outbox (id, aggregate_key, route, headers, body)
             SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[])",
        )
        .bind(c.ids)
        .bind(c.keys)
        .bind(c.routes)
        .bind(c.headers)
        .bind(c.bodies)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query("ANALYZE raw_outbox")
        .execute(&pool)
        .await
        .unwrap();
    let started = Instant::now();
    let tasks = (0..conns)
        .map(|i| {
            let pool = pool.clone();
            tokio::spawn(async move {
                loop {
                    let rows = sqlx::query(RAW_CLAIM).bind(format!("raw-{i}")).fetch_all(&pool).await.unwrap();
                    if rows.is_empty() {
                        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM raw_outbox WHERE published_at IS NULL")
                            .fetch_one(&pool)
                            .await
                            .unwrap();
                        if left == 0 {
                            return;
                        }
                        continue;
                    }
                    let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(0)).collect();
                    sqlx::query("UPDATE raw_outbox SET published_at = now(), locked_by = NULL, locked_until = NULL WHERE id = ANY($1)")
                        .bind(ids)
                        .execute(&pool)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    join_all(tasks).await;
    measure("relay", "raw", conns, n, started)
}

struct InboxEffect {
    store: PgStore,
    done: AtomicUsize,
}

async fn inbox_effect(
    store: &PgStore,
    consumer: &str,
    id: postroom_core::MessageId,
    key: &str,
) -> postroom_core::Result<bool> {
    let mut tx = store.begin().await?;
    let new = inbox::claim(&mut tx, store.prefix(), consumer, id).await?;
    if new {
        sqlx::query("INSERT INTO effects (consumer, key, n) VALUES ($1, $2, 1) ON CONFLICT (consumer, key) DO UPDATE SET n = effects.n + 1")
            .bind(consumer)
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(map_error)?;
    }
    commit(tx).await?;
    Ok(new)
}

#[async_trait]
impl Handler for InboxEffect {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let new = inbox_effect(
            &self.store,
            "bench",
            m.envelope.id,
            &m.envelope.aggregate.id,
        )
        .await?;
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(if new {
            Handled::Applied
        } else {
            Handled::Duplicate
        })
    }
}

async fn fill_queue(pool: &PgPool, consumer: &str, n: usize) {
    let msgs: Vec<_> = (0..n).map(message).collect();
    for chunk in msgs.chunks(500) {
        let c = Columns::of(chunk);
        sqlx::query(
            "INSERT INTO postroom_queue (consumer, message_id, routing_key, headers, body)
             SELECT $1, * FROM unnest($2::uuid[], $3::text[], $4::jsonb[], $5::bytea[])",
        )
        .bind(consumer)
        .bind(c.ids)
        .bind(c.routes)
        .bind(c.headers)
        .bind(c.bodies)
        .execute(pool)
        .await
        .unwrap();
    }
}

pub async fn consumer(url: &str, conns: u32, n: usize) -> Vec<Measure> {
    let store = store(url, conns).await;
    let pool = store.pool().clone();
    let prefetch = 16;
    let queue = store
        .queue(
            QueueConfig::default()
                .prefetch(prefetch)
                .poll_interval(Duration::from_millis(2)),
        )
        .unwrap();
    let sub = queue.subscribe("bench", &["order.created"]).await.unwrap();
    fill_queue(&pool, "bench", n).await;
    let mut cfg = ConsumerConfig::new(
        "bench",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.concurrency = conns as usize;
    let handler = Arc::new(InboxEffect {
        store: store.clone(),
        done: AtomicUsize::new(0),
    });
    let consumer = Arc::new(Consumer::new(cfg, handler.clone()));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let run = tokio::spawn({
        let c = consumer.clone();
        async move { c.run(sub, rx).await }
    });
    while handler.done.load(Ordering::SeqCst) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _ = stop.send(true);
    run.await.unwrap();
    let ours = measure("consumer", "postroom", conns, n, started);

    fill_queue(&pool, "raw", n).await;
    let started = Instant::now();
    let tasks = (0..conns)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let pool = store.pool().clone();
                loop {
                    let rows = sqlx::query(
                        "WITH c AS (SELECT id FROM postroom_queue WHERE consumer = 'raw' AND visible_at <= now()
                             AND (leased_until IS NULL OR leased_until < now()) ORDER BY visible_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
                         UPDATE postroom_queue q SET lease_owner = $1, lease_token = gen_random_uuid(),
                             leased_until = now() + interval '30 seconds', delivery_count = q.delivery_count + 1
                         FROM c WHERE q.id = c.id RETURNING q.id, q.message_id, q.lease_token, q.body",
                    )
                    .bind(format!("raw-{i}"))
                    .bind(prefetch as i64)
                    .fetch_all(&pool)
                    .await
                    .unwrap();
                    if rows.is_empty() {
                        return;
                    }
                    for r in rows {
                        let (id, mid, token): (i64, uuid::Uuid, uuid::Uuid) = (r.get(0), r.get(1), r.get(2));
                        inbox_effect(&store, "raw", mid.into(), "k").await.unwrap();
                        sqlx::query("DELETE FROM postroom_queue WHERE id = $1 AND lease_token = $2")
                            .bind(id)
                            .bind(token)
                            .execute(&pool)
                            .await
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    join_all(tasks).await;
    vec![ours, measure("consumer", "raw", conns, n, started)]
}

pub async fn produce(url: &str, conns: u32, n: usize) -> Vec<Measure> {
    let store = store(url, conns).await;
    let mut out = Vec::new();
    for (variant, per_tx) in [("one_per_tx", 1usize), ("batched_100_per_tx", 100)] {
        let msgs: Arc<Vec<_>> = Arc::new((0..n).map(message).collect());
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
                        let mut tx = store.begin().await.unwrap();
                        if per_tx == 1 {
                            outbox::enqueue(&mut tx, store.prefix(), &chunk[0].0, &chunk[0].1)
                                .await
                                .unwrap();
                        } else {
                            outbox::enqueue_batch(&mut tx, store.prefix(), chunk)
                                .await
                                .unwrap();
                        }
                        commit(tx).await.unwrap();
                    }
                })
            })
            .collect();
        join_all(tasks).await;
        out.push(measure("produce", variant, conns, n, started));
        sqlx::query("TRUNCATE postroom_outbox")
            .execute(store.pool())
            .await
            .unwrap();
    }
    out
}
