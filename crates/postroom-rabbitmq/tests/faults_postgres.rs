//! The source article's fault tests that need the business database (R19), on RabbitMQ and
//! PostgreSQL. The handler claims the inbox row and applies the effect in one PostgreSQL
//! transaction. PostgreSQL "goes down" for the handler by cutting a TCP path to the real
//! server (a loopback forwarder this test owns), never by stopping the shared server.

mod common;

use common::{TestRabbit, eventually, order};
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::stats::ConsumerStats;
use postroom_core::{
    Delivery, EnvelopeDecoder, ErrorClass, Handled, Handler, HandlerError, Incoming,
    OutgoingMessage, ParkingFilter, ParkingStore, Publisher, RetryPolicy, Route, Subscriber,
    async_trait,
};
use postroom_postgres::{TablePrefix, commit, inbox};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A loopback TCP forwarder to PostgreSQL that can be cut (connections reset, new ones refused).
struct Path {
    port: u16,
    up: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
}

impl Path {
    async fn to_postgres() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (cut, _) = watch::channel(0u64);
        let (up2, cut2) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !up2.load(Ordering::SeqCst) {
                    drop(inbound); // refused: closed at once
                    continue;
                }
                let mut cut_rx = cut2.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect("127.0.0.1:5432").await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Self { port, up, cut }
    }

    fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// A fresh database with the inbox and an effects table.
struct Db {
    admin: sqlx::PgPool,
    name: String,
    prefix: TablePrefix,
}

impl Db {
    async fn fresh() -> Self {
        let admin_url = std::env::var("POSTROOM_TEST_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let admin = sqlx::PgPool::connect(&admin_url)
            .await
            .expect("PostgreSQL is required (POSTROOM_TEST_PG)");
        let name = format!("pr_fault_{}", common::rand_suffix());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        let pool = sqlx::PgPool::connect(&format!("postgres://postgres@127.0.0.1:5432/{name}"))
            .await
            .unwrap();
        let prefix = TablePrefix::default();
        postroom_postgres::migrate(&pool, &prefix).await.unwrap();
        sqlx::query("CREATE TABLE effects (message_id UUID NOT NULL, key TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        Self {
            admin,
            name,
            prefix,
        }
    }

    fn url_via(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/{}", self.name)
    }

    async fn effects(&self, key: &str) -> i64 {
        let pool =
            sqlx::PgPool::connect(&format!("postgres://postgres@127.0.0.1:5432/{}", self.name))
                .await
                .unwrap();
        let n = sqlx::query_scalar("SELECT COUNT(*) FROM effects WHERE key = $1")
            .bind(key)
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    }

    async fn drop_db(self) {
        let _ = sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .execute(&self.admin)
            .await;
    }
}

/// Inbox claim + effect in one PostgreSQL transaction; every call is recorded.
struct PgEffect {
    pool: sqlx::PgPool,
    prefix: TablePrefix,
    calls: Mutex<Vec<(u32, Instant)>>,
}

#[async_trait]
impl Handler for PgEffect {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        self.calls.lock().unwrap().push((m.attempt, Instant::now()));
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| HandlerError::from(postroom_postgres::map_error(e)))?;
        if !inbox::claim(&mut tx, &self.prefix, "inventory", m.envelope.id).await? {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO effects (message_id, key) VALUES ($1, $2)")
            .bind(m.envelope.id.as_uuid())
            .bind(&m.envelope.aggregate.id)
            .execute(&mut *tx)
            .await
            .map_err(|e| HandlerError::from(postroom_postgres::map_error(e)))?;
        commit(tx).await?;
        Ok(Handled::Applied)
    }
}

fn handler(db: &Db, port: u16) -> Arc<PgEffect> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&db.url_via(port))
        .unwrap();
    Arc::new(PgEffect {
        pool,
        prefix: db.prefix.clone(),
        calls: Mutex::new(Vec::new()),
    })
}

fn consumer(h: Arc<PgEffect>, ladder: &str) -> Consumer<PgEffect> {
    let mut cfg = ConsumerConfig::new(
        "inventory",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.retry = RetryPolicy {
        max_age: None,
        jitter: 0.0,
        ..RetryPolicy::with_ladder(ladder.parse().unwrap())
    };
    cfg.breaker.failure_threshold = 0;
    cfg.concurrency = 1;
    Consumer::new(cfg, h)
}

fn run(
    c: Consumer<PgEffect>,
    sub: postroom_rabbitmq::RabbitSubscriber,
) -> (
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
    Arc<ConsumerStats>,
) {
    let stats = c.stats();
    let (stop, rx) = watch::channel(false);
    (
        stop,
        tokio::spawn(async move { c.run(sub, rx).await }),
        stats,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_longer_than_the_budget_walks_every_stage_then_parks() {
    let rabbit = TestRabbit::new("1s,2s").await;
    rabbit.add_consumer("inventory", &["order.created"]).await;
    let db = Db::fresh().await;
    let path = Path::to_postgres().await;
    path.down();
    let h = handler(&db, path.port);
    let publisher = rabbit.publisher();
    let (stop, task, stats) = run(
        consumer(h.clone(), "1s,2s"),
        rabbit.subscriber("inventory", 4, publisher.clone()),
    );
    let env = order("down-1", 1);
    publisher
        .publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            !stats.snapshot().parked_by_code.is_empty()
        })
        .await,
        "parked"
    );
    // Nothing more arrives: no hot requeue loop.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop.send(true);
    task.await.unwrap();
    let calls = h.calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![0, 1, 2],
        "one delivery per stage, then parked"
    );
    assert!(
        calls[1].1 - calls[0].1 >= Duration::from_secs(1),
        "stage 1s kept its delay"
    );
    assert!(
        calls[2].1 - calls[1].1 >= Duration::from_secs(2),
        "stage 2s kept its delay"
    );
    let s = stats.snapshot();
    assert_eq!(s.retries_by_stage.get(&0), Some(&1));
    assert_eq!(s.retries_by_stage.get(&1), Some(&1));
    // The parked message carries the diagnostics of a lost database.
    let (store, _dir) = common::sqlite().await;
    let n = postroom_rabbitmq::ingest_parking(
        rabbit.broker.clone(),
        rabbit.topology().names("inventory"),
        store.clone(),
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    assert_eq!(n, 1);
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.attempts, 3);
    assert_eq!(p.error_class, ErrorClass::Transient);
    assert!(
        ["connection", "timeout", "io"].contains(&p.error_code.as_str()),
        "{}",
        p.error_code
    );
    path.restore();
    assert_eq!(db.effects("down-1").await, 0);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_back_before_the_budget_ends_is_processed_once() {
    let rabbit = TestRabbit::new("1s,3s").await;
    rabbit.add_consumer("inventory", &["order.created"]).await;
    let db = Db::fresh().await;
    let path = Path::to_postgres().await;
    path.down();
    let h = handler(&db, path.port);
    let publisher = rabbit.publisher();
    let (stop, task, stats) = run(
        consumer(h.clone(), "1s,3s"),
        rabbit.subscriber("inventory", 4, publisher.clone()),
    );
    let env = order("back-1", 1);
    publisher
        .publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            h.calls.lock().unwrap().len() >= 2
        })
        .await,
        "two failed attempts"
    );
    path.restore();
    assert!(
        eventually(Duration::from_secs(20), || async {
            stats.snapshot().applied == 1
        })
        .await,
        "processed after recovery"
    );
    let _ = stop.send(true);
    task.await.unwrap();
    assert!(stats.snapshot().parked_by_code.is_empty());
    assert_eq!(db.effects("back-1").await, 1);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_published_but_original_ack_lost_gives_one_effect() {
    let rabbit = TestRabbit::new("1s").await;
    rabbit.add_consumer("inventory", &["order.created"]).await;
    let db = Db::fresh().await;
    let path = Path::to_postgres().await;
    let publisher = rabbit.publisher();
    let env = order("lost-ack-1", 1);
    publisher
        .publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    // The first delivery: its retry copy is published and confirmed, then the connection dies
    // before the original's ack (the delivery is dropped with its subscriber, never acked).
    let mut sub = rabbit.subscriber("inventory", 1, publisher.clone());
    let first = loop {
        if let Some(d) = sub.next(Duration::from_secs(1)).await.unwrap() {
            break d;
        }
    };
    assert_eq!(first.message().id, Some(env.id));
    let mut copy = OutgoingMessage::from_envelope(&env, "order.created");
    copy.route = Route::Consumer("inventory".into());
    copy.headers.insert("x-retry-attempt".into(), "1".into());
    publisher.publish(&copy).await.unwrap();
    drop(first);
    drop(sub);
    // Both copies arrive at a healthy consumer: one effect, one duplicate absorbed.
    let h = handler(&db, path.port);
    let (stop, task, stats) = run(
        consumer(h.clone(), "1s"),
        rabbit.subscriber("inventory", 4, publisher.clone()),
    );
    assert!(
        eventually(Duration::from_secs(20), || async {
            h.calls.lock().unwrap().len() >= 2
        })
        .await,
        "both copies delivered"
    );
    let _ = stop.send(true);
    task.await.unwrap();
    let s = stats.snapshot();
    assert_eq!((s.applied, s.duplicates), (1, 1));
    assert_eq!(db.effects("lost-ack-1").await, 1);
    db.drop_db().await;
}
