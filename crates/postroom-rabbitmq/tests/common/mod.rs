//! Shared test support: endpoints from the environment, a random workload prefix per test,
//! and cleanup of every queue, exchange and policy under that prefix on drop. A missing
//! broker fails the test; it is never skipped.
#![allow(dead_code)]

pub mod probe;

use postroom_rabbitmq::{
    Broker, ConfirmingPublisher, ManagementApi, RabbitSubscriber, SubscriberOptions, Topology,
    TopologyConfig,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    pub config: Mutex<TopologyConfig>,
    pub api: ManagementApi,
    pub broker: Arc<Broker>,
}

impl TestRabbit {
    /// A workload `pr-<random>` with its own work exchange and `ladder`.
    pub async fn new(ladder: &str) -> Self {
        let prefix = format!("prt-{}", rand_suffix());
        let config = TopologyConfig {
            prefix: prefix.clone(),
            exchange: format!("{prefix}.orders"),
            ladder: ladder.parse().expect("ladder"),
            delivery_limit: 5,
            ..TopologyConfig::default()
        };
        let api = ManagementApi::new(&api_url(), "/").expect("management API URL");
        let options = postroom_rabbitmq::BrokerOptions {
            connection_name: prefix.clone(),
            ..Default::default()
        };
        let broker = Broker::connect_with(&amqp_url(), options)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "RabbitMQ is required at {} (set POSTROOM_TEST_AMQP): {e}",
                    amqp_url()
                )
            });
        api.exchanges().await.unwrap_or_else(|e| {
            panic!(
                "the management API is required at {} (set POSTROOM_TEST_RABBIT_API): {e}",
                api_url()
            )
        });
        Self {
            prefix,
            config: Mutex::new(config),
            api,
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

    /// Messages in a queue per the management API (refreshed every few seconds by the broker).
    pub async fn queue_messages(&self, queue: &str) -> u64 {
        self.api
            .queue(queue)
            .await
            .unwrap()
            .and_then(|q| q.messages)
            .unwrap_or(0)
    }
}

impl Drop for TestRabbit {
    fn drop(&mut self) {
        let prefix = self.prefix.clone();
        let url = api_url();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let api = ManagementApi::new(&url, "/").expect("api");
                if let Err(e) = api.delete_everything_named(&prefix).await {
                    eprintln!("cleanup of {prefix} failed: {e}");
                }
            });
        })
        .join();
    }
}

/// Poll until `f` holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    f().await
}

/// A fresh SQLite store in a temp dir (kept alive by the returned guard).
pub async fn sqlite() -> (Arc<postroom_sqlite::SqliteStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = postroom_sqlite::SqliteStore::open(dir.path().join("t.db"))
        .await
        .unwrap();
    (Arc::new(store), dir)
}

/// An `order.created` envelope.
pub fn order(id: &str, version: u64) -> postroom_core::Envelope {
    postroom_core::Envelope::builder("order.created", "tests")
        .aggregate("order", id, version)
        .correlation_id(format!("corr-{id}"))
        .data(serde_json::json!({"order_id": id}))
        .build()
}
