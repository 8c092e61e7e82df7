//! Kafka as a postroom [`Transport`]: the idempotent producer, consumer groups per consumer
//! name, one retry topic per ladder stage (the delay capability), a parking topic per consumer
//! read by the parking ingest, per-key order from partitions, and lag figures for the backlog.

use crate::backlog::lag;
use crate::config::{KafkaConfig, RetryOrdering};
use crate::consumer::{KafkaSubscriber, SubscriberSpec};
use crate::naming::{ConsumerTopics, topic_of};
use crate::producer::KafkaProducer;
use crate::topology::{TopicSpec, admin, consumer_topics, is_pattern, provide_topics, topic_spec};
use postroom_core::{
    Backlog, BoxSubscriber, Capabilities, DelayCapability, KeyOrdering, Publisher,
    RedeliveryCounting, Result, Subscription, Transport, async_trait,
};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::producer::MAX_MESSAGE_BYTES;

/// One workload on Kafka.
pub struct KafkaTransport {
    config: KafkaConfig,
    producer: Arc<KafkaProducer>,
    admin: Arc<AdminClient<DefaultClientContext>>,
    /// Topics known to exist (created or found by this transport).
    created: Mutex<HashSet<String>>,
    /// Routes each consumer subscribed to (for backlog figures).
    routes: Mutex<BTreeMap<String, Vec<String>>>,
}

postroom_core::debug_showing!(KafkaTransport {
    prefix: config.prefix,
    ordering: config.ordering
});

impl KafkaTransport {
    /// The workload of `config` (clients connect lazily).
    pub fn new(config: KafkaConfig) -> Result<Self> {
        config.validate()?;
        let producer = Arc::new(KafkaProducer::new(&config)?);
        let admin = Arc::new(admin(&config)?);
        Ok(Self {
            config,
            producer,
            admin,
            created: Mutex::new(HashSet::new()),
            routes: Mutex::new(BTreeMap::new()),
        })
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// The confirming producer.
    #[must_use]
    pub fn producer(&self) -> &Arc<KafkaProducer> {
        &self.producer
    }

    /// Names of `consumer`'s group and topics.
    #[must_use]
    pub fn names(&self, consumer: &str) -> ConsumerTopics {
        ConsumerTopics::new(&self.config.prefix, consumer)
    }

    /// Create `topics` where this transport has not seen them yet; `ledger` is a delivery
    /// ledger among them.
    async fn ensure(&self, topics: Vec<String>, ledger: Option<&str>) -> Result<()> {
        let missing: Vec<TopicSpec> = {
            let known = self
                .created
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            topics
                .into_iter()
                .filter(|t| !known.contains(t))
                .map(|name| topic_spec(&self.config, &name, ledger == Some(name.as_str())))
                .collect()
        };
        for t in &missing {
            crate::naming::check_topic(&t.name)?;
        }
        provide_topics(&self.config, &self.admin, &missing).await?;
        let names: Vec<String> = missing.iter().map(|t| t.name.clone()).collect();
        self.producer.prime(&names).await;
        self.created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(missing.into_iter().map(|t| t.name));
        Ok(())
    }

    fn spec(&self, subscription: &Subscription) -> SubscriberSpec {
        let names = self.names(&subscription.consumer);
        let (patterns, exact): (Vec<&String>, Vec<&String>) =
            subscription.routes.iter().partition(|r| is_pattern(r));
        let mut topics: Vec<String> = exact
            .iter()
            .map(|r| topic_of(&self.config.prefix, r))
            .collect();
        topics.push(names.redrive.clone());
        SubscriberSpec {
            group: names.group,
            topics,
            patterns: patterns.into_iter().cloned().collect(),
            prefetch: subscription.prefetch,
            ordering: self.config.ordering,
            stages: true,
        }
    }
}

#[async_trait]
impl Transport for KafkaTransport {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            delay: match self.config.ordering {
                // The delay is kept by holding the record in its paused partition: any delay.
                RetryOrdering::Blocking => DelayCapability::UpTo(Duration::from_secs(24 * 3600)),
                RetryOrdering::RetryTopics | RetryOrdering::PerKeyRetry => {
                    DelayCapability::Stages(self.config.ladder.clone())
                }
            },
            // Kafka does not count deliveries of a record; the consumer's delivery ledger
            // (`<group>.deliveries`) does, so the consumer parks a crash loop at its bound.
            redelivery: RedeliveryCounting {
                counted: true,
                native_limit: None,
            },
            // A partition stays with its consumer until a rebalance revokes it.
            ownership: None,
            ordering: KeyOrdering::Partitioned,
            max_message_bytes: MAX_MESSAGE_BYTES,
        }
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.producer.clone()
    }

    /// Create the subscription's topics (route topics, stages, redrive, parking); patterns
    /// match topics made by others and create nothing.
    async fn bind(&self, subscription: &Subscription) -> Result<()> {
        subscription.validate()?;
        for r in &subscription.routes {
            crate::naming::check_route(r)?;
        }
        self.routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(subscription.consumer.clone(), subscription.routes.clone());
        self.ensure(
            consumer_topics(&self.config, &subscription.consumer, &subscription.routes),
            Some(&self.names(&subscription.consumer).deliveries),
        )
        .await
    }

    async fn subscribe(&self, subscription: &Subscription) -> Result<BoxSubscriber> {
        self.bind(subscription).await?;
        let sub = KafkaSubscriber::start(
            &self.config,
            self.producer.clone(),
            &subscription.consumer,
            self.spec(subscription),
        )?;
        Ok(BoxSubscriber::new(sub))
    }

    async fn dead_letters(&self, consumer: &str) -> Result<Option<BoxSubscriber>> {
        let names = self.names(consumer);
        self.ensure(vec![names.parking.clone()], None).await?;
        let sub = KafkaSubscriber::start(
            &self.config,
            self.producer.clone(),
            consumer,
            SubscriberSpec {
                group: names.parking_group.clone(),
                topics: vec![names.parking.clone()],
                patterns: Vec::new(),
                prefetch: 32,
                ordering: RetryOrdering::RetryTopics,
                stages: false,
            },
        )?;
        Ok(Some(BoxSubscriber::new(sub)))
    }

    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        let names = self.names(consumer);
        let routes = self
            .routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(consumer)
            .cloned()
            .unwrap_or_default();
        let mut ready_topics: Vec<String> = routes
            .iter()
            .filter(|r| !is_pattern(r))
            .map(|r| topic_of(&self.config.prefix, r))
            .collect();
        ready_topics.push(names.redrive.clone());
        let stage_topics = names.retries(&self.config.ladder);
        let config = self.config.clone();
        let group = names.group.clone();
        tokio::task::spawn_blocking(move || {
            let ready = lag(&config, &group, &ready_topics)?;
            let delayed = lag(&config, &group, &stage_topics)?;
            Ok(Backlog {
                ready,
                unacked: 0,
                delayed,
                oldest_ready_age: None,
            })
        })
        .await
        .map_err(|e| {
            postroom_core::Error::new(
                postroom_core::ErrorKind::Io,
                format!("backlog task failed: {e}"),
            )
        })?
    }
}
