//! Shared test support: the broker from `POSTROOM_TEST_KAFKA` (default 127.0.0.1:9092, tansu)
//! or a mock cluster of the test's own, a random workload prefix per test, and every topic
//! under that prefix deleted on drop. A missing broker fails the test; it is never skipped.
#![allow(dead_code)]

pub mod mock;
pub mod ordered;

use postroom_core::parking::ingest::ingest_dead_letters;
use postroom_core::{ParkedMessage, ParkingFilter, Subscription, Transport};
use postroom_kafka::topology::{admin, delete_topics};
use postroom_kafka::{KafkaConfig, KafkaTransport, TopicProvisioning};
use postroom_testkit::StoreFixture;
use postroom_testkit::servers::KafkaMockCluster;
use postroom_testkit::servers::kafka_mock::program;
use postroom_testkit::stores::sqlite::SqliteFixture;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::sync::Arc;
use std::time::Duration;

/// The broker under test.
pub fn brokers() -> String {
    std::env::var("POSTROOM_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A random suffix.
pub fn rand_suffix() -> String {
    uuid::Uuid::now_v7().simple().to_string()[18..].to_string()
}

/// A mock cluster of three brokers for this test.
pub fn mock_cluster() -> Arc<KafkaMockCluster> {
    Arc::new(KafkaMockCluster::start(
        &program(env!("CARGO_BIN_EXE_postroom-kafka-mock")),
        3,
    ))
}

/// One test's isolated workload on the shared broker or on a mock cluster of its own.
pub struct TestKafka {
    pub prefix: String,
    pub config: KafkaConfig,
    /// The mock cluster the workload runs on, if not on the shared broker.
    pub mock: Option<Arc<KafkaMockCluster>>,
}

impl TestKafka {
    /// A workload `pk-<random>` with `ladder` on the shared broker; fails at once when no
    /// broker answers.
    pub fn new(ladder: &str) -> Self {
        Self::on(brokers(), ladder, None)
    }

    /// A workload on a mock cluster of three brokers started for this test: topics of three
    /// partitions replicated three times, made through the mock's control channel
    /// ([`mock::OnMockCluster`]) and checked by the transport (`topics=existing`).
    pub fn on_mock(ladder: &str) -> Self {
        let cluster = mock_cluster();
        let mut t = Self::on(cluster.bootstrap().to_string(), ladder, Some(cluster));
        t.config.topics = TopicProvisioning::Existing;
        t.config.replication = 3;
        t
    }

    /// A transport of this workload: on a mock cluster, one that makes its consumers' topics.
    pub fn transport(&self, config: KafkaConfig) -> Arc<dyn Transport> {
        match &self.mock {
            Some(m) => Arc::new(mock::OnMockCluster::new(config, m.clone())),
            None => Arc::new(KafkaTransport::new(config).expect("transport")),
        }
    }

    fn on(brokers: String, ladder: &str, mock: Option<Arc<KafkaMockCluster>>) -> Self {
        // Logs when RUST_LOG asks for them.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let prefix = format!("pk-{}", rand_suffix());
        let mut config = KafkaConfig::new(brokers.clone())
            .prefix(prefix.clone())
            .ladder(ladder.parse().expect("ladder"));
        config.revoke_wait = Duration::from_secs(5);
        if std::env::var("POSTROOM_KAFKA_FALLBACK").is_ok() {
            config
                .extra
                .push(("api.version.request".into(), "false".into()));
            config
                .extra
                .push(("broker.version.fallback".into(), "2.4.0".into()));
        }
        if let Ok(debug) = std::env::var("POSTROOM_KAFKA_DEBUG") {
            config.extra.push(("debug".into(), debug));
        }
        let probe: BaseConsumer = config.client_config().create().expect("client");
        probe
            .fetch_metadata(None, Duration::from_secs(10))
            .unwrap_or_else(|e| {
                panic!(
                    "a Kafka broker is required at {brokers} (set POSTROOM_TEST_KAFKA; `bash scripts/services.sh kafka` starts one): {e}"
                )
            });
        Self {
            prefix,
            config,
            mock,
        }
    }

    /// Topics under this test's prefix.
    pub fn topics(&self) -> Vec<String> {
        let probe: BaseConsumer = self.config.client_config().create().expect("client");
        probe
            .fetch_metadata(None, Duration::from_secs(10))
            .map(|md| {
                md.topics()
                    .iter()
                    .map(|t| t.name().to_string())
                    .filter(|n| n.starts_with(&self.prefix))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl TestKafka {
    /// A transport on this workload with consumer `consumer` bound to `route`: the topics it
    /// needs exist.
    pub async fn transport_bound_to(&self, consumer: &str, route: &str) -> KafkaTransport {
        if let Some(m) = &self.mock {
            mock::provision(m, &self.config, consumer, &[route.to_string()]);
        }
        let t = KafkaTransport::new(self.config.clone()).expect("transport");
        t.bind(&Subscription::new(consumer, &[route]))
            .await
            .expect("bind");
        t
    }

    /// The topics under this test's prefix on which `group` has committed an offset: the
    /// topics the group was assigned and read.
    pub fn committed_topics(&self, group: &str) -> Vec<String> {
        let mut config = self.config.client_config();
        config.set("group.id", group);
        let probe: BaseConsumer = config.create().expect("client");
        let md = probe
            .fetch_metadata(None, Duration::from_secs(10))
            .expect("metadata");
        let mut wanted = rdkafka::TopicPartitionList::new();
        for t in md
            .topics()
            .iter()
            .filter(|t| t.name().starts_with(&self.prefix))
        {
            for p in t.partitions() {
                wanted.add_partition(t.name(), p.id());
            }
        }
        let committed = probe
            .committed_offsets(wanted, Duration::from_secs(10))
            .expect("committed offsets");
        let mut topics: Vec<String> = committed
            .elements()
            .iter()
            .filter(|e| matches!(e.offset(), rdkafka::Offset::Offset(_)))
            .map(|e| e.topic().to_string())
            .collect();
        topics.sort();
        topics.dedup();
        topics
    }
}

impl Drop for TestKafka {
    /// Delete the test's topics once its consumers had time to leave their groups (a topic
    /// deleted under a live librdkafka consumer can hang that consumer's shutdown).
    fn drop(&mut self) {
        if self.mock.is_some() {
            // The cluster goes with the test.
            return;
        }
        let config = self.config.clone();
        let prefix = self.prefix.clone();
        let _ = std::thread::Builder::new()
            .name("delete-test-topics".into())
            .spawn(move || {
                std::thread::sleep(Duration::from_secs(3));
                let this = TestKafka {
                    prefix,
                    config,
                    mock: None,
                };
                let topics = this.topics();
                if let Ok(admin) = admin(&this.config) {
                    let _ = futures::executor::block_on(delete_topics(&admin, &topics));
                }
                std::mem::forget(this);
            });
    }
}

/// Parked records of `consumer`, moved from its parking topic into `store`.
pub async fn parked(
    t: &dyn Transport,
    store: &Arc<SqliteFixture>,
    consumer: &str,
) -> Vec<ParkedMessage> {
    // The ingest's group takes a few seconds to join on tansu; it stops after 10 s of quiet.
    ingest_dead_letters(t, consumer, store.parking(), Duration::from_secs(10))
        .await
        .expect("ingest");
    let filter = ParkingFilter {
        consumer: Some(consumer.into()),
        include_redriven: true,
        ..ParkingFilter::default()
    };
    store.parking().search(&filter, 100).await.expect("search")
}
