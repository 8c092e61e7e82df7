//! The WAL relay on a broker: the faults of the relay cases, with the outbox read from a
//! PostgreSQL cluster's write-ahead log (a cluster of the test's own, `wal_level = logical`)
//! and published through the broker's transport to the library's consumer loop, whose
//! handler claims the inbox and applies the effect in one transaction. Written once; each
//! broker's tests call them with their transport.

use super::unique;
use crate::servers::PgCluster;
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::failpoint::{self, Action};
use postroom_core::stats::ConsumerStats;
use postroom_core::{
    Envelope, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming, MessageId,
    OutgoingMessage, Publisher, Result, Subscription, Transport, async_trait,
};
use postroom_postgres::wal::{WalRelay, WalRelayConfig};
use postroom_postgres::{PgStore, commit, outbox};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A cluster, a migrated store on it, a topic and a consumer of the broker bound to it.
struct WalRig {
    cluster: Arc<PgCluster>,
    store: PgStore,
    transport: Arc<dyn Transport>,
    topic: String,
    consumer: String,
}

impl WalRig {
    async fn start(transport: Arc<dyn Transport>) -> Self {
        let cluster = Arc::new(
            tokio::task::spawn_blocking(PgCluster::start)
                .await
                .expect("start a cluster"),
        );
        let store = PgStore::connect(&cluster.url("postgres"))
            .await
            .expect("connect");
        store.migrate().await.expect("migrate");
        sqlx::raw_sql("CREATE TABLE wal_effects (message_id UUID PRIMARY KEY)")
            .execute(store.pool())
            .await
            .expect("effects table");
        let (topic, consumer) = (unique("t.wal."), unique("walc"));
        transport
            .bind(&Subscription::new(consumer.clone(), &[topic.as_str()]).prefetch(8))
            .await
            .expect("bind the consumer");
        Self {
            cluster,
            store,
            transport,
            topic,
            consumer,
        }
    }

    fn relay(&self, id: &str, publisher: Arc<dyn Publisher>) -> WalRelay<dyn Publisher> {
        let config = WalRelayConfig {
            relay_id: id.into(),
            batch_size: 8,
            batches_in_flight: 4,
            retry_after: Duration::from_millis(200),
            standby_poll: Duration::from_millis(200),
            ..WalRelayConfig::default()
        };
        WalRelay::new(&self.store, publisher, config).expect("relay")
    }

    /// Versions `versions` of each of `aggregates`, a transaction per version.
    async fn produce(
        &self,
        aggregates: &[String],
        versions: std::ops::RangeInclusive<u64>,
    ) -> Vec<OutgoingMessage> {
        let mut all = Vec::new();
        for v in versions {
            let batch: Vec<OutgoingMessage> = aggregates
                .iter()
                .map(|a| {
                    let env = Envelope::builder("order.created", "wal")
                        .aggregate("order", a.clone(), v)
                        .build();
                    OutgoingMessage::from_envelope(&env, &self.topic)
                })
                .collect();
            let mut tx = self.store.begin().await.expect("begin");
            outbox::enqueue_batch(&mut tx, self.store.prefix(), &batch)
                .await
                .expect("outbox rows");
            commit(tx).await.expect("commit");
            all.extend(batch);
        }
        all
    }

    /// The library's consumer loop on the topic, applying each message once via the inbox, with
    /// the retry ladder `1s,2s` the brokers' test topologies have.
    async fn consume(
        &self,
    ) -> (
        Arc<ConsumerStats>,
        watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let sub = self
            .transport
            .subscribe(
                &Subscription::new(self.consumer.clone(), &[self.topic.as_str()]).prefetch(8),
            )
            .await
            .expect("subscribe");
        let handler = Arc::new(InboxEffect {
            store: self.store.clone(),
            consumer: self.consumer.clone(),
        });
        let mut cfg = ConsumerConfig::new(
            self.consumer.clone(),
            EnvelopeDecoder::new().accept("order.created", 1..=1),
        );
        cfg.concurrency = 4;
        // The brokers' tests declare their topologies with the suite's ladder.
        let ladder: postroom_core::RetryLadder = "1s,2s".parse().expect("ladder");
        cfg.retry = postroom_core::RetryPolicy {
            max_retries: ladder.len() as u32,
            max_unknown_retries: 1,
            max_age: None,
            jitter: 0.1,
            ladder,
        };
        let consumer = Consumer::for_transport(cfg, handler, &self.transport.capabilities())
            .expect("consumer");
        let stats = consumer.stats();
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(async move { consumer.run(sub, rx).await });
        (stats, stop, task)
    }

    async fn effects(&self) -> u64 {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM wal_effects")
            .fetch_one(self.store.pool())
            .await
            .expect("count effects");
        u64::try_from(n).unwrap_or(0)
    }
}

/// The handler: claim the inbox and apply the effect in one transaction.
struct InboxEffect {
    store: PgStore,
    consumer: String,
}

#[async_trait]
impl Handler for InboxEffect {
    async fn handle(&self, m: &Incoming) -> std::result::Result<Handled, HandlerError> {
        let mut tx = self.store.begin().await?;
        if !postroom_postgres::inbox::claim(
            &mut tx,
            self.store.prefix(),
            &self.consumer,
            m.envelope.id,
        )
        .await?
        {
            commit(tx).await?;
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO wal_effects (message_id) VALUES ($1)")
            .bind(m.envelope.id.as_uuid())
            .execute(&mut *tx)
            .await
            .map_err(postroom_postgres::map_error)?;
        commit(tx).await?;
        Ok(Handled::Applied)
    }
}

/// The broker's publisher, logging (aggregate, version, id) of each confirmed message.
struct Logging {
    inner: Arc<dyn Publisher>,
    log: Mutex<Vec<(String, u64, MessageId)>>,
}

#[async_trait]
impl Publisher for Logging {
    async fn publish(&self, m: &OutgoingMessage) -> Result<()> {
        self.publish_batch(std::slice::from_ref(m))
            .await
            .pop()
            .unwrap_or(Ok(()))
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        let results = self.inner.publish_batch(messages).await;
        for (m, r) in messages.iter().zip(&results) {
            if r.is_ok()
                && let Ok(env) = serde_json::from_slice::<Envelope>(&m.body)
            {
                self.log.lock().expect("log").push((
                    env.aggregate.key(),
                    env.aggregate.version,
                    m.id,
                ));
            }
        }
        results
    }
}

fn logging(transport: &Arc<dyn Transport>) -> Arc<Logging> {
    Arc::new(Logging {
        inner: transport.publisher(),
        log: Mutex::new(Vec::new()),
    })
}

/// Per aggregate, no version is confirmed before every earlier one was.
fn assert_in_order(log: &[(String, u64, MessageId)]) {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    for (agg, v, _) in log {
        let prev = last.get(agg.as_str()).copied().unwrap_or(0);
        assert!(
            *v <= prev + 1,
            "{agg}: version {v} confirmed before version {}",
            prev + 1
        );
        last.insert(agg, prev.max(*v));
    }
}

fn run_relay(relay: WalRelay<dyn Publisher>) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, rx) = watch::channel(false);
    (stop, tokio::spawn(async move { relay.run(rx).await }))
}

async fn wait_applied(rig: &WalRig, stats: &ConsumerStats, n: u64, within: Duration) {
    crate::wait::until(within, "every message applied", async || {
        rig.effects().await == n && stats.snapshot().applied == n
    })
    .await;
}

/// The relay dies at its crash point between the broker's confirms and the slot's advance;
/// the next relay publishes the same messages again with the same ids, and the inbox absorbs
/// the copies: each effect once, none lost, per-aggregate order kept.
pub async fn wal_relay_crash_between_publish_and_advance(transport: Arc<dyn Transport>) {
    let rig = WalRig::start(transport).await;
    let aggs: Vec<String> = (0..4).map(|i| unique(&format!("a{i}-"))).collect();
    let doomed_id = unique("doomed");
    let first = logging(&rig.transport);
    let doomed = rig.relay(&doomed_id, first.clone());
    doomed.prepare().await.expect("prepare");
    let (stats, stop_consumer, consumer) = rig.consume().await;
    let messages = rig.produce(&aggs, 1..=5).await;
    failpoint::arm_for(
        failpoint::WAL_BEFORE_ADVANCE,
        &doomed_id,
        Action::Panic,
        0,
        Some(1),
    );
    let (_keep, rx) = watch::channel(false);
    let died = tokio::spawn(async move { doomed.run(rx).await }).await;
    assert!(
        died.expect_err("the relay dies at its crash point")
            .is_panic()
    );
    let published_before = first.log.lock().expect("log").len();
    assert!(
        published_before > 0,
        "the broker confirmed before the relay died"
    );
    let second = logging(&rig.transport);
    let (stop, relay) = run_relay(rig.relay(&unique("next"), second.clone()));
    wait_applied(&rig, &stats, messages.len() as u64, Duration::from_secs(60)).await;
    // Everything the dead relay published goes out again (an aggregate it published whole
    // can be republished after the last new effect was applied).
    let dead: BTreeSet<MessageId> = first.log.lock().expect("log").iter().map(|l| l.2).collect();
    crate::wait::until(
        Duration::from_secs(30),
        "the dead relay's messages republished",
        async || {
            let again: BTreeSet<MessageId> = second
                .log
                .lock()
                .expect("log")
                .iter()
                .map(|l| l.2)
                .collect();
            again.is_superset(&dead)
        },
    )
    .await;
    crate::wait::until(Duration::from_secs(30), "the copies absorbed", async || {
        stats.snapshot().duplicates >= dead.len() as u64
    })
    .await;
    let _ = stop.send(true);
    relay.await.expect("the relay ends");
    let _ = stop_consumer.send(true);
    consumer.await.expect("the consumer ends");
    assert_in_order(&second.log.lock().expect("log"));
    assert_eq!(
        rig.effects().await,
        messages.len() as u64,
        "each effect once"
    );
}

/// The database is SIGKILLed and restarted while the relay streams: the relay reconnects
/// and goes on from the slot's position; nothing is lost, each effect applies once, and
/// per-aggregate order holds.
pub async fn wal_relay_survives_a_database_kill_mid_stream(transport: Arc<dyn Transport>) {
    let rig = WalRig::start(transport).await;
    let aggs: Vec<String> = (0..4).map(|i| unique(&format!("k{i}-"))).collect();
    let publisher = logging(&rig.transport);
    let relay = rig.relay(&unique("kill"), publisher.clone());
    relay.prepare().await.expect("prepare");
    let (stats, stop_consumer, consumer) = rig.consume().await;
    let (stop, task) = run_relay(relay);
    let mut messages = rig.produce(&aggs, 1..=10).await;
    crate::wait::until(Duration::from_secs(30), "the relay streaming", async || {
        !publisher.log.lock().expect("log").is_empty()
    })
    .await;
    let cluster = rig.cluster.clone();
    tokio::task::spawn_blocking(move || {
        cluster.kill();
        cluster.start_again();
    })
    .await
    .expect("kill and restart the database");
    // Written after the restart (the pool reconnects).
    let mut more = None;
    for _ in 0..50 {
        match tokio::time::timeout(Duration::from_secs(5), async {
            rig.produce(&aggs, 11..=15).await
        })
        .await
        {
            Ok(m) => {
                more = Some(m);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    messages.extend(more.expect("producing after the restart"));
    wait_applied(&rig, &stats, messages.len() as u64, Duration::from_secs(90)).await;
    let _ = stop.send(true);
    task.await.expect("the relay ends");
    let _ = stop_consumer.send(true);
    consumer.await.expect("the consumer ends");
    assert_in_order(&publisher.log.lock().expect("log"));
    let got: BTreeSet<MessageId> = publisher
        .log
        .lock()
        .expect("log")
        .iter()
        .map(|l| l.2)
        .collect();
    assert!(messages.iter().all(|m| got.contains(&m.id)), "nothing lost");
}

/// A short soak: the relay runs while producers write `POSTROOM_WAL_SOAK_MESSAGES` messages
/// (default 400) over 8 aggregates in small transactions; every one is applied once, in order
/// per aggregate.
pub async fn wal_relay_short_soak(transport: Arc<dyn Transport>) {
    let n: u64 = std::env::var("POSTROOM_WAL_SOAK_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let rig = WalRig::start(transport).await;
    let aggs: Vec<String> = (0..8).map(|i| unique(&format!("s{i}-"))).collect();
    let publisher = logging(&rig.transport);
    let relay = rig.relay(&unique("soak"), publisher.clone());
    relay.prepare().await.expect("prepare");
    let (stats, stop_consumer, consumer) = rig.consume().await;
    let (stop, task) = run_relay(relay);
    let versions = n.div_ceil(aggs.len() as u64).max(1);
    let mut produced = 0u64;
    for v in 1..=versions {
        produced += rig.produce(&aggs, v..=v).await.len() as u64;
    }
    wait_applied(&rig, &stats, produced, Duration::from_secs(120)).await;
    let _ = stop.send(true);
    task.await.expect("the relay ends");
    let _ = stop_consumer.send(true);
    consumer.await.expect("the consumer ends");
    assert_in_order(&publisher.log.lock().expect("log"));
    let s = stats.snapshot();
    assert_eq!(s.applied, produced);
    assert!(s.parked_by_code.is_empty(), "nothing parked: {s:?}");
}

/// Expand to one test per WAL relay case on the transport `$make` builds (an async
/// expression evaluating to an `Arc<dyn Transport>` and a guard kept for the test's length:
/// the broker's test resources, cleaned up on drop).
#[macro_export]
macro_rules! wal_relay_suite {
    ($make:expr) => {
        $crate::wal_relay_suite!(@cases $make;
            wal_relay_crash_between_publish_and_advance,
            wal_relay_survives_a_database_kill_mid_stream,
            wal_relay_short_soak,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (transport, _guard) = $make;
                $crate::cases::wal::$case(transport).await;
            }
        )*
    };
}
