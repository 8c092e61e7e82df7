//! The workload's topics on the mock cluster, which has no admin API: a transport that makes
//! a consumer's topics (its routes, stages, redrive, parking, a one-partition ledger) through
//! the mock's control channel before binding or subscribing, with the workload's partitions
//! and replication; the Kafka transport itself runs with `topics=existing` and checks them.

use postroom_core::{
    Backlog, BoxSubscriber, Capabilities, Publisher, Result, Subscription, Transport, async_trait,
};
use postroom_kafka::topology::{consumer_topics, topic_spec};
use postroom_kafka::{ConsumerTopics, KafkaConfig, KafkaTransport};
use postroom_testkit::servers::KafkaMockCluster;
use std::sync::Arc;

/// The Kafka transport over a mock cluster whose topics it makes first.
pub struct OnMockCluster {
    inner: KafkaTransport,
    config: KafkaConfig,
    mock: Arc<KafkaMockCluster>,
}

impl OnMockCluster {
    /// The transport of `config` on `mock`.
    pub fn new(config: KafkaConfig, mock: Arc<KafkaMockCluster>) -> Self {
        Self {
            inner: KafkaTransport::new(config.clone()).expect("transport"),
            config,
            mock,
        }
    }

    /// Make the topics of `subscription`'s consumer that are missing.
    pub fn provision(&self, subscription: &Subscription) {
        provision(
            &self.mock,
            &self.config,
            &subscription.consumer,
            &subscription.routes,
        );
    }
}

/// Make the topics of `consumer` on `routes` on `mock`, as the workload `config` wants them.
pub fn provision(mock: &KafkaMockCluster, config: &KafkaConfig, consumer: &str, routes: &[String]) {
    let ledger = ConsumerTopics::new(&config.prefix, consumer).deliveries;
    for name in consumer_topics(config, consumer, routes) {
        let spec = topic_spec(config, &name, name == ledger);
        match mock.command(&format!(
            "create-topic {} {} {}",
            spec.name, spec.partitions, spec.replication
        )) {
            Ok(()) => {}
            Err(e) if e.to_ascii_lowercase().contains("already exists") => {}
            Err(e) => panic!("mock cluster: create topic {name}: {e}"),
        }
    }
}

#[async_trait]
impl Transport for OnMockCluster {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.inner.publisher()
    }

    async fn bind(&self, subscription: &Subscription) -> Result<()> {
        self.provision(subscription);
        self.inner.bind(subscription).await
    }

    async fn subscribe(&self, subscription: &Subscription) -> Result<BoxSubscriber> {
        self.provision(subscription);
        self.inner.subscribe(subscription).await
    }

    async fn dead_letters(&self, consumer: &str) -> Result<Option<BoxSubscriber>> {
        self.inner.dead_letters(consumer).await
    }

    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        self.inner.backlog(consumer).await
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}
