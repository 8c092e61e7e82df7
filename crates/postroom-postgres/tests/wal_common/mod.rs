//! What the WAL relay's tests share: a cluster of the test's own with `wal_level = logical`
//! and a migrated store on it, a publisher that logs what its broker confirmed, producers,
//! and the oracles (published exactly these ids; per-aggregate order).
#![allow(dead_code)]

use postroom_core::{
    Envelope, MessageId, OutgoingMessage, Publisher, Result, Transport, async_trait,
};
use postroom_postgres::wal::{WalRelay, WalRelayConfig};
use postroom_postgres::{PgQueue, PgStore, TablePrefix, commit, outbox};
use postroom_testkit::servers::PgCluster;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A cluster of the test's own and a migrated store on its `postgres` database.
pub struct Logical {
    pub cluster: PgCluster,
    pub store: PgStore,
}

impl Logical {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    pub async fn start_with(settings: &[(&str, &str)]) -> Self {
        let cluster = tokio::task::spawn_blocking({
            let settings: Vec<(String, String)> = settings
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move || {
                let s: Vec<(&str, &str)> = settings
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                PgCluster::start_with(&s)
            }
        })
        .await
        .unwrap();
        let store = PgStore::connect(&cluster.url("postgres")).await.unwrap();
        store.migrate().await.unwrap();
        Self { cluster, store }
    }

    /// The queue transport in this store's tables, with consumer `inventory` bound to
    /// `orders`: the broker of the tests that are not about a broker.
    pub async fn queue(&self) -> PgQueue {
        let q = self.store.queue(PgQueue::defaults()).unwrap();
        q.bind("inventory", &["orders"]).await.unwrap();
        q
    }
}

/// One publish the broker confirmed, in the order the confirms came.
#[derive(Clone, Debug)]
pub struct Confirmed {
    pub id: MessageId,
    pub aggregate: String,
    pub version: u64,
}

/// A publisher that logs what `inner` confirmed, and can fail the first publish of one id.
pub struct Logged {
    pub inner: Arc<dyn Publisher>,
    pub log: Mutex<Vec<Confirmed>>,
    pub fail_once: Mutex<Option<MessageId>>,
    pub failed: Mutex<Vec<MessageId>>,
}

impl Logged {
    pub fn new(inner: Arc<dyn Publisher>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            log: Mutex::new(Vec::new()),
            fail_once: Mutex::new(None),
            failed: Mutex::new(Vec::new()),
        })
    }

    pub fn on(transport: &dyn Transport) -> Arc<Self> {
        Self::new(transport.publisher())
    }

    pub fn confirmed(&self) -> Vec<Confirmed> {
        self.log.lock().unwrap().clone()
    }

    pub fn ids(&self) -> BTreeSet<MessageId> {
        self.confirmed().iter().map(|c| c.id).collect()
    }
}

fn confirmed_of(m: &OutgoingMessage) -> Confirmed {
    let env: Envelope = serde_json::from_slice(&m.body).expect("an envelope body");
    Confirmed {
        id: m.id,
        aggregate: env.aggregate.key(),
        version: env.aggregate.version,
    }
}

#[async_trait]
impl Publisher for Logged {
    async fn publish(&self, m: &OutgoingMessage) -> Result<()> {
        self.publish_batch(std::slice::from_ref(m))
            .await
            .pop()
            .unwrap()
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        let doomed = {
            let mut f = self.fail_once.lock().unwrap();
            match *f {
                Some(id) if messages.iter().any(|m| m.id == id) => f.take(),
                _ => None,
            }
        };
        let (pass, fail): (Vec<_>, Vec<_>) = messages
            .iter()
            .enumerate()
            .partition(|(_, m)| Some(m.id) != doomed);
        let sent: Vec<OutgoingMessage> = pass.iter().map(|(_, m)| (*m).clone()).collect();
        let mut results: Vec<Option<Result<()>>> = (0..messages.len()).map(|_| None).collect();
        for ((i, m), r) in pass.iter().zip(self.inner.publish_batch(&sent).await) {
            if r.is_ok() {
                self.log.lock().unwrap().push(confirmed_of(m));
            }
            results[*i] = Some(r);
        }
        for (i, m) in fail {
            self.failed.lock().unwrap().push(m.id);
            results[i] = Some(Err(postroom_core::Error::new(
                postroom_core::ErrorKind::Nacked,
                "refused once by the test",
            )));
        }
        results.into_iter().map(Option::unwrap).collect()
    }
}

/// An `order.created` of aggregate `agg` at `version`, to `orders`.
pub fn order(agg: &str, version: u64) -> OutgoingMessage {
    let env = Envelope::builder("order.created", "wal")
        .aggregate("order", agg, version)
        .data(serde_json::json!({"agg": agg, "version": version}))
        .build();
    OutgoingMessage::from_envelope(&env, "orders")
}

/// Write `messages` as outbox rows in one transaction, committed or rolled back.
pub async fn produce(store: &PgStore, messages: &[OutgoingMessage], commit_it: bool) {
    let mut tx = store.begin().await.unwrap();
    outbox::enqueue_batch(&mut tx, store.prefix(), messages)
        .await
        .unwrap();
    if commit_it {
        commit(tx).await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

/// A relay config for tests: small batches, several in flight, short retries.
pub fn config(relay_id: &str) -> WalRelayConfig {
    WalRelayConfig {
        relay_id: relay_id.into(),
        batch_size: 4,
        batches_in_flight: 4,
        retry_after: Duration::from_millis(200),
        standby_poll: Duration::from_millis(200),
        ..WalRelayConfig::default()
    }
}

/// A relay running in the background until the returned sender says stop.
pub struct Running {
    pub stop: watch::Sender<bool>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub fn start<P: Publisher + ?Sized + 'static>(relay: WalRelay<P>) -> Self {
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(async move { relay.run(rx).await });
        Self { stop, task }
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the relay stops within 30 s")
            .expect("the relay ends without a panic");
    }
}

/// Fail, saying what differs, unless `got` holds exactly the ids of `expected`.
pub fn assert_published_exactly(expected: &[OutgoingMessage], got: &BTreeSet<MessageId>) {
    let want: BTreeSet<MessageId> = expected.iter().map(|m| m.id).collect();
    let lost: Vec<_> = want.difference(got).collect();
    let extra: Vec<_> = got.difference(&want).collect();
    assert!(
        lost.is_empty() && extra.is_empty(),
        "lost {lost:?}, published but not expected {extra:?}"
    );
}

/// Fail unless, per aggregate, the first confirm of each version comes in version order and
/// no version is confirmed before every earlier one was.
pub fn assert_aggregate_order(log: &[Confirmed]) {
    let mut last: std::collections::BTreeMap<&str, u64> = Default::default();
    for c in log {
        let prev = last.get(c.aggregate.as_str()).copied().unwrap_or(0);
        assert!(
            c.version <= prev + 1,
            "{}: version {} confirmed before version {}",
            c.aggregate,
            c.version,
            prev + 1
        );
        last.insert(&c.aggregate, prev.max(c.version));
    }
}

/// Wait up to `within` until `publisher` confirmed every id of `messages`.
pub async fn all_confirmed(publisher: &Logged, messages: &[OutgoingMessage], within: Duration) {
    let want: BTreeSet<MessageId> = messages.iter().map(|m| m.id).collect();
    postroom_testkit::wait::until(within, "every message confirmed", async || {
        publisher.ids().is_superset(&want)
    })
    .await;
}

/// The slot's confirmed position as the server has it.
pub async fn slot_position(store: &PgStore, slot: &str) -> Option<String> {
    sqlx::query_scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(slot)
    .fetch_optional(store.pool())
    .await
    .unwrap()
}

/// The store's prefix, for SQL.
pub fn prefix() -> TablePrefix {
    TablePrefix::default()
}
