//! Shared test support: endpoints from the environment, a random workload prefix per test,
//! and cleanup of every queue, exchange and policy under that prefix on drop. A missing
//! broker fails the test; it is never skipped.
#![allow(dead_code)]

pub mod node;
pub mod probe;

use postroom_rabbitmq::{
    Broker, ConfirmingPublisher, ManagementApi, RabbitSubscriber, RabbitTransport,
    SubscriberOptions, Topology, TopologyConfig,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// AMQP endpoint.
pub fn amqp_url() -> String {
    std::env::var("POSTROOM_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// Management API endpoint.
pub fn api_url() -> String {
    std::env::var("POSTROOM_TEST_RABBIT_API")
        .unwrap_or_else(|_| "http://guest:guest@127.0.0.1:15672".into())
}

/// A random suffix.
pub fn rand_suffix() -> String {
    uuid::Uuid::now_v7().simple().to_string()[18..].to_string()
}

/// One test's isolated workload on the shared broker.
pub struct TestRabbit {
    pub prefix: String,
    pub api_url: String,
    pub config: Mutex<TopologyConfig>,
    pub api: ManagementApi,
    pub broker: Arc<Broker>,
    /// A link of its own for the tests' passive declares: it outlives a closed transport.
    probe: Arc<Broker>,
}

impl TestRabbit {
    /// A workload `pr-<random>` with its own work exchange and `ladder`.
    pub async fn new(ladder: &str) -> Self {
        Self::on(&amqp_url(), &api_url(), ladder, |_| {}).await
    }

    /// A workload as [`TestRabbit::new`] makes it, its link's options changed by `tweak`.
    pub async fn with_options(
        ladder: &str,
        tweak: impl FnOnce(&mut postroom_rabbitmq::BrokerOptions),
    ) -> Self {
        Self::on(&amqp_url(), &api_url(), ladder, tweak).await
    }

    /// A workload on the broker at `amqp` / `api`, its link's options changed by `tweak`.
    pub async fn on(
        amqp: &str,
        api_url: &str,
        ladder: &str,
        tweak: impl FnOnce(&mut postroom_rabbitmq::BrokerOptions),
    ) -> Self {
        let prefix = format!("prt-{}", rand_suffix());
        let config = TopologyConfig {
            prefix: prefix.clone(),
            exchange: format!("{prefix}.orders"),
            ladder: ladder.parse().expect("ladder"),
            delivery_limit: 5,
            ..TopologyConfig::default()
        };
        let api = ManagementApi::new(api_url, "/").expect("management API URL");
        let mut options = postroom_rabbitmq::BrokerOptions {
            connection_name: prefix.clone(),
            ..Default::default()
        };
        tweak(&mut options);
        let broker = Broker::connect_with(amqp, options)
            .await
            .unwrap_or_else(|e| {
                panic!("RabbitMQ is required at {amqp} (set POSTROOM_TEST_AMQP): {e}")
            });
        api.exchanges().await.unwrap_or_else(|e| {
            panic!(
                "the management API is required at {api_url} (set POSTROOM_TEST_RABBIT_API): {e}"
            )
        });
        Self {
            prefix,
            api_url: api_url.to_string(),
            config: Mutex::new(config),
            api,
            probe: broker.sibling("probe"),
            broker,
        }
    }

    /// Change the configuration.
    pub fn configure(&self, f: impl FnOnce(&mut TopologyConfig)) {
        f(&mut self.config.lock().unwrap());
    }

    /// The configuration now.
    pub fn cfg(&self) -> TopologyConfig {
        self.config.lock().unwrap().clone()
    }

    /// Add a consumer with bindings and apply the topology.
    pub async fn add_consumer(&self, name: &str, bindings: &[&str]) -> Topology {
        self.configure(|c| *c = c.clone().with_consumer(name, bindings));
        let t = self.topology();
        t.apply().await.expect("apply topology");
        self.broker.redeclare_on_reconnect(t.desired());
        t
    }

    /// The topology of the current configuration.
    pub fn topology(&self) -> Topology {
        Topology::new(self.cfg(), self.api.clone()).expect("topology")
    }

    /// A confirming publisher.
    pub fn publisher(&self) -> Arc<ConfirmingPublisher> {
        Arc::new(ConfirmingPublisher::new(self.broker.clone(), &self.cfg()))
    }

    /// A subscriber for `consumer` with `prefetch`.
    pub fn subscriber(
        &self,
        consumer: &str,
        prefetch: u16,
        publisher: Arc<ConfirmingPublisher>,
    ) -> RabbitSubscriber {
        RabbitSubscriber::new(
            self.broker.clone(),
            publisher,
            &self.cfg(),
            consumer,
            SubscriberOptions::new(prefetch),
        )
        .expect("subscriber")
    }

    /// Delete the binding from `source` with `key` (a fault).
    pub async fn unbind(&self, source: &str, key: &str) {
        let b = self
            .api
            .bindings()
            .await
            .unwrap()
            .into_iter()
            .find(|b| b.source == source && b.routing_key == key)
            .unwrap_or_else(|| panic!("no binding {source} / {key}"));
        self.api.unbind(&b).await.unwrap();
    }

    /// The workload as a postroom transport (the current configuration).
    pub fn transport(&self) -> postroom_rabbitmq::RabbitTransport {
        postroom_rabbitmq::RabbitTransport::new(
            self.broker.clone(),
            self.cfg(),
            Some(self.api.clone()),
        )
        .expect("transport")
    }

    /// Move `consumer`'s parking queue into `store` until it stays empty for `idle`.
    pub async fn ingest<S: postroom_core::ParkingStore + ?Sized>(
        &self,
        consumer: &str,
        store: Arc<S>,
        idle: Duration,
    ) -> postroom_core::Result<u64> {
        postroom_core::parking::ingest::ingest_dead_letters(
            &self.transport(),
            consumer,
            store,
            idle,
        )
        .await
    }

    /// Everything parked for `consumer`, after moving its parking queue into `store` until it
    /// stays empty for `idle`.
    pub async fn parked(
        &self,
        consumer: &str,
        store: &Arc<postroom_sqlite::SqliteStore>,
        idle: Duration,
    ) -> Vec<postroom_core::ParkedMessage> {
        use postroom_core::{ParkingFilter, ParkingStore};
        self.ingest(consumer, store.clone(), idle)
            .await
            .expect("ingest");
        store
            .search(
                &ParkingFilter {
                    consumer: Some(consumer.into()),
                    ..ParkingFilter::default()
                },
                100,
            )
            .await
            .unwrap()
    }

    /// Consumers attached to `queue` as the broker knows them now.
    pub async fn consumers(&self, queue: &str) -> u32 {
        self.passive_declare(queue).await.consumer_count()
    }

    /// Messages ready in `queue` as the broker knows them now (not those delivered and
    /// unacknowledged: call it with no consumer attached to count them all).
    pub async fn queue_messages(&self, queue: &str) -> u64 {
        u64::from(self.passive_declare(queue).await.message_count())
    }

    /// A passive declare of `queue` on a channel of its own: the broker's counts at this
    /// moment (the management API's lag by its statistics interval, seconds on a busy node).
    async fn passive_declare(&self, queue: &str) -> lapin::Queue {
        use lapin::options::QueueDeclareOptions;
        use lapin::types::FieldTable;
        let ch = self.probe.channel().await.expect("channel");
        let ok = ch
            .queue_declare(
                queue,
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("passive declare");
        let _ = ch.close(200, "done").await;
        ok
    }
}

impl Drop for TestRabbit {
    fn drop(&mut self) {
        let prefix = self.prefix.clone();
        let url = self.api_url.clone();
        postroom_testkit::servers::clean_up(async move {
            let api = ManagementApi::new(&url, "/").expect("api");
            if let Err(e) = api.delete_everything_named(&prefix).await {
                eprintln!("cleanup of {prefix} failed: {e}");
            }
        });
    }
}

/// Poll until a condition holds or a timeout passes.
#[allow(unused_imports)]
pub use postroom_testkit::cases::wait_for as eventually;

/// A fresh SQLite store in a temp dir (kept alive by the returned guard).
pub async fn sqlite() -> (Arc<postroom_sqlite::SqliteStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = postroom_sqlite::SqliteStore::open(dir.path().join("t.db"))
        .await
        .unwrap();
    (Arc::new(store), dir)
}

/// Everything parked for `consumer`, after moving its parking queue into `store` until it
/// stays empty for 300 ms.
pub async fn parked(
    t: &TestRabbit,
    consumer: &str,
    store: &Arc<postroom_sqlite::SqliteStore>,
) -> Vec<postroom_core::ParkedMessage> {
    t.parked(consumer, store, Duration::from_millis(300)).await
}

/// A workload on a `1s` ladder whose `consumer` takes `order.created`, with a fresh parking
/// store (kept alive by the returned guard) and a confirming publisher.
pub async fn parking_workload(
    consumer: &str,
) -> (
    TestRabbit,
    Arc<postroom_sqlite::SqliteStore>,
    tempfile::TempDir,
    Arc<ConfirmingPublisher>,
) {
    let t = TestRabbit::new("1s").await;
    t.add_consumer(consumer, &["order.created"]).await;
    let (store, dir) = sqlite().await;
    let publisher = t.publisher();
    (t, store, dir, publisher)
}

/// Run `consumer` on `subscription` of `transport` in a task of its own, until `shutdown`
/// says stop.
pub fn spawn_on_transport<H: postroom_core::Handler + 'static>(
    consumer: postroom_core::Consumer<H>,
    transport: &Arc<RabbitTransport>,
    subscription: postroom_core::Subscription,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<postroom_core::Result<()>> {
    let transport = transport.clone();
    tokio::spawn(async move {
        consumer
            .run_on(transport.as_ref(), &subscription, shutdown)
            .await
    })
}

/// An `order.created` envelope.
#[allow(unused_imports)]
pub use postroom_testkit::cases::order;

/// Publish `order(id, 1)` on `order.created` through `publisher` (confirmed) and return it.
pub async fn publish_order(
    publisher: &(impl postroom_core::Publisher + ?Sized),
    id: &str,
) -> postroom_core::Envelope {
    let env = order(id, 1);
    publisher
        .publish(&postroom_core::OutgoingMessage::from_envelope(
            &env,
            "order.created",
        ))
        .await
        .unwrap();
    env
}

/// Publish each of `envelopes` on `order.created` through `publisher`, one after another, each
/// confirmed before the next is sent.
pub async fn publish_each(
    publisher: &(impl postroom_core::Publisher + ?Sized),
    envelopes: &[postroom_core::Envelope],
) {
    for env in envelopes {
        publisher
            .publish(&postroom_core::OutgoingMessage::from_envelope(
                env,
                "order.created",
            ))
            .await
            .unwrap();
    }
}
