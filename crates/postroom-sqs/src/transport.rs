//! Amazon SQS as a postroom [`Transport`]: the workload's queues (from its topology, plus
//! consumers bound at run time, whose queues are created then), a batching publisher routing
//! topics to the queues whose bindings match, subscribers whose retries are visibility
//! timeouts, the DLQs as dead-letter places, backlog figures from queue attributes.

use crate::config::{SQS_MAX_VISIBILITY, TopologyConfig};
use crate::deleter::Deleter;
use crate::publisher::SqsPublisher;
use crate::routes::{ConsumerQueues, Routes};
use crate::stats::SqsStats;
use crate::subscriber::{DeadLetterSource, QueueContext, SqsSubscriber};
use crate::topology::Topology;
use aws_sdk_sqs::Client;
use postroom_core::parking::{LastErrorLog, MemoryLastErrors};
use postroom_core::{
    Backlog, BoxSubscriber, Capabilities, DelayCapability, Error, ErrorKind, KeyOrdering,
    Publisher, RedeliveryCounting, Result, Subscription, Transport, async_trait,
};
use std::sync::Arc;
use std::time::Duration;

/// What a retry delay must leave of SQS's 12 hours for the time between the receive and the
/// retry (the handler's run): the longest delay offered is 11 hours.
pub const RETRY_MARGIN: Duration = Duration::from_secs(3600);

/// Bytes of a message's size left for postroom's attributes (its headers, and a parking
/// copy's diagnostics) when stating the largest body.
pub const ATTRIBUTE_RESERVE: usize = 16 * 1024;

/// One workload on SQS.
pub struct SqsTransport {
    client: Client,
    topology: Topology,
    routes: Arc<Routes>,
    publisher: Arc<SqsPublisher>,
    last_errors: Arc<dyn LastErrorLog>,
    stats: Arc<SqsStats>,
}

impl std::fmt::Debug for SqsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsTransport")
            .field("prefix", &self.topology.config().prefix)
            .field("fifo", &self.topology.config().fifo)
            .finish_non_exhaustive()
    }
}

impl SqsTransport {
    /// The workload of `config` on `client`'s endpoint. The queues of the consumers it lists
    /// must exist (`Topology::apply`); consumers bound later get theirs created then.
    pub async fn connect(client: Client, config: TopologyConfig) -> Result<Self> {
        let topology = Topology::new(client.clone(), config.clone())?;
        let routes = Arc::new(Routes::default());
        for c in &config.consumers {
            routes.insert(topology.existing_consumer(&c.name, &c.bindings).await?);
        }
        let publisher = Arc::new(SqsPublisher::new(routes.clone(), topology.clone()));
        Ok(Self {
            client,
            topology,
            routes,
            publisher,
            last_errors: Arc::new(MemoryLastErrors::default()),
            stats: Arc::new(SqsStats::default()),
        })
    }

    /// Keep the consumers' last errors in `log` (default: in memory, bounded): where a copy
    /// SQS moved to a DLQ by itself is joined with its last error.
    #[must_use]
    pub fn with_last_errors(mut self, log: Arc<dyn LastErrorLog>) -> Self {
        self.last_errors = log;
        self
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &TopologyConfig {
        self.topology.config()
    }

    /// The topology (plan, apply).
    #[must_use]
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The client.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> Arc<SqsStats> {
        self.stats.clone()
    }

    /// The queues of `consumer`, once known.
    #[must_use]
    pub fn queues(&self, consumer: &str) -> Option<Arc<ConsumerQueues>> {
        self.routes.get(consumer)
    }

    /// Bind `patterns` for `consumer`, creating its queues first when it is new.
    async fn ensure(&self, consumer: &str, patterns: &[String]) -> Result<Arc<ConsumerQueues>> {
        if !self.routes.bind(consumer, patterns) {
            let (queues, _) = self.topology.apply_consumer(consumer, patterns).await?;
            self.routes.insert(queues);
        }
        self.routes.get(consumer).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("no queues for consumer {consumer:?}"),
            )
        })
    }

    fn context(&self, queues: &ConsumerQueues, dead_letters: bool) -> QueueContext {
        let cfg = self.config();
        let (queue_name, queue_url) = if dead_letters {
            (queues.names.dlq.clone(), queues.dlq_url.clone())
        } else {
            (queues.names.work.clone(), queues.work_url.clone())
        };
        QueueContext {
            deleter: Deleter::start(self.client.clone(), queue_url.clone(), self.stats.clone()),
            client: self.client.clone(),
            consumer: queues.names.consumer.clone(),
            queue_name,
            queue_url,
            dlq_url: queues.dlq_url.clone(),
            fifo: cfg.fifo,
            visibility: Duration::from_secs(cfg.visibility_timeout.as_secs().max(1)),
            extend: cfg.extend_visibility,
            last_errors: self.last_errors.clone(),
            stats: self.stats.clone(),
            dead_letters: dead_letters.then(|| DeadLetterSource {
                queue_name: queues.names.work.clone(),
                max_receive_count: cfg.max_receive_count,
            }),
        }
    }

    /// The subscriber of `subscription` (bound first), unboxed.
    pub async fn subscriber(&self, subscription: &Subscription) -> Result<SqsSubscriber> {
        subscription.validate()?;
        let queues = self
            .ensure(&subscription.consumer, &subscription.routes)
            .await?;
        Ok(SqsSubscriber::new(
            self.context(&queues, false),
            subscription.prefetch,
        ))
    }

    /// A subscriber on `consumer`'s DLQ, for the parking ingest.
    pub async fn dead_letter_subscriber(&self, consumer: &str) -> Result<SqsSubscriber> {
        let queues = self.ensure(consumer, &[]).await?;
        Ok(SqsSubscriber::new(self.context(&queues, true), 10))
    }
}

#[async_trait]
impl Transport for SqsTransport {
    fn name(&self) -> &'static str {
        crate::publisher::TRANSPORT
    }

    fn capabilities(&self) -> Capabilities {
        let cfg = self.config();
        Capabilities {
            delay: DelayCapability::UpTo(SQS_MAX_VISIBILITY - RETRY_MARGIN),
            redelivery: RedeliveryCounting {
                counted: true,
                native_limit: Some(cfg.max_receive_count),
            },
            ownership: (!cfg.extend_visibility).then_some(cfg.visibility_timeout),
            ordering: if cfg.fifo {
                KeyOrdering::Partitioned
            } else {
                KeyOrdering::None
            },
            max_message_bytes: cfg.max_message_bytes.saturating_sub(ATTRIBUTE_RESERVE),
        }
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.publisher.clone()
    }

    async fn bind(&self, subscription: &Subscription) -> Result<()> {
        self.ensure(&subscription.consumer, &subscription.routes)
            .await
            .map(|_| ())
    }

    async fn subscribe(&self, subscription: &Subscription) -> Result<BoxSubscriber> {
        Ok(BoxSubscriber::new(self.subscriber(subscription).await?))
    }

    async fn dead_letters(&self, consumer: &str) -> Result<Option<BoxSubscriber>> {
        Ok(Some(BoxSubscriber::new(
            self.dead_letter_subscriber(consumer).await?,
        )))
    }

    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        let queues = match self.routes.get(consumer) {
            Some(q) => q,
            None => {
                let found = self.topology.existing_consumer(consumer, &[]).await?;
                self.routes.insert(found);
                self.ensure(consumer, &[]).await?
            }
        };
        crate::backlog::of_queue(&self.client, &queues.work_url).await
    }
}
