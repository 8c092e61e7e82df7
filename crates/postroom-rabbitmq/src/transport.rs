//! RabbitMQ as a postroom [`Transport`]: the workload's topology (its ladder is the delay
//! capability: one TTL stage queue per delay), a confirming publisher, subscribers on the
//! consumers' work queues, the parking queues as dead-letter places, and backlog figures from
//! the management API.

use crate::config::TopologyConfig;
use crate::connection::Broker;
use crate::management::ManagementApi;
use crate::publisher::ConfirmingPublisher;
use crate::subscriber::{RabbitSubscriber, SubscriberOptions};
use crate::topology::desired::DesiredTopology;
use crate::{RabbitBacklog, topology};
use postroom_core::{
    Backlog, BacklogProbe, BoxSubscriber, Capabilities, DelayCapability, Error, ErrorKind,
    KeyOrdering, Publisher, RedeliveryCounting, Result, Subscription, Transport, async_trait,
};
use std::sync::Arc;

use crate::publisher::MAX_MESSAGE_BYTES;

/// One workload on RabbitMQ: consumers on one connection, publishing (the relay's and the
/// consumers' retry and parking copies) on another, so that a broker blocking publishers
/// under a memory or disk alarm never stops acks. On the publishing connection the relay's
/// publisher and each subscriber's have channels of their own.
pub struct RabbitTransport {
    broker: Arc<Broker>,
    publish_link: Arc<Broker>,
    publisher: Arc<ConfirmingPublisher>,
    /// Grows when a consumer that is not in the topology file binds (through the management
    /// API, which sets the stage queues' policies).
    config: std::sync::RwLock<TopologyConfig>,
    api: Option<ManagementApi>,
}

impl std::fmt::Debug for RabbitTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.config();
        f.debug_struct("RabbitTransport")
            .field("prefix", &c.prefix)
            .field("exchange", &c.exchange)
            .finish_non_exhaustive()
    }
}

impl RabbitTransport {
    /// The workload of `config` on `broker` (the consumers' link); publishing gets a link of
    /// its own to the same broker ([`Broker::sibling`]), connected on first use. The
    /// management API, when given, answers backlog questions. Re-declares the topology's
    /// exchanges, queues and bindings after every reconnect.
    pub fn new(
        broker: Arc<Broker>,
        config: TopologyConfig,
        api: Option<ManagementApi>,
    ) -> Result<Self> {
        config.validate()?;
        broker.redeclare_on_reconnect(DesiredTopology::of(&config));
        let publish_link = broker.sibling("publish");
        let publisher = Arc::new(ConfirmingPublisher::new(publish_link.clone(), &config));
        Ok(Self {
            broker,
            publish_link,
            publisher,
            config: std::sync::RwLock::new(config),
            api,
        })
    }

    /// The topology configuration now.
    #[must_use]
    pub fn config(&self) -> TopologyConfig {
        self.config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The consumers' link.
    #[must_use]
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The publishing link.
    #[must_use]
    pub fn publish_link(&self) -> &Arc<Broker> {
        &self.publish_link
    }

    /// The confirming publisher.
    #[must_use]
    pub fn confirming_publisher(&self) -> &Arc<ConfirmingPublisher> {
        &self.publisher
    }

    /// The management API, when configured.
    #[must_use]
    pub fn api(&self) -> Option<&ManagementApi> {
        self.api.as_ref()
    }

    fn known(&self, consumer: &str) -> Result<TopologyConfig> {
        let config = self.config();
        if config.consumers.iter().any(|c| c.name == consumer) {
            Ok(config)
        } else {
            Err(Error::new(
                ErrorKind::Config,
                format!(
                    "consumer {consumer:?} is not in the RabbitMQ topology (prefix {:?}); add it to the topology's consumers",
                    config.prefix
                ),
            ))
        }
    }

    /// Add `consumer` on `routes` to the topology and apply it through the management API
    /// (queues, stage queues and their policies).
    async fn add_consumer(&self, consumer: &str, routes: &[&str]) -> Result<()> {
        let Some(api) = &self.api else {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "consumer {consumer:?} is not in the RabbitMQ topology, and without the management API it cannot be added (its retry stages need policies); add it to the topology file and run `postroom topology apply`"
                ),
            ));
        };
        let next = self.config().with_consumer(consumer, routes);
        let topology = topology::Topology::new(next.clone(), api.clone())?;
        topology.apply().await?;
        self.broker.redeclare_on_reconnect(topology.desired());
        *self
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        Ok(())
    }
}

#[async_trait]
impl Transport for RabbitTransport {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    fn capabilities(&self) -> Capabilities {
        let config = self.config();
        Capabilities {
            delay: DelayCapability::Stages(config.ladder.clone()),
            redelivery: RedeliveryCounting {
                counted: true,
                // A quorum queue's delivery-limit N dead-letters on the (N+1)th return.
                native_limit: Some(config.delivery_limit.saturating_add(1)),
            },
            // An AMQP channel keeps unacked deliveries until it closes.
            ownership: None,
            ordering: KeyOrdering::None,
            max_message_bytes: MAX_MESSAGE_BYTES,
        }
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.publisher.clone()
    }

    /// A consumer in the topology: declare its exchanges, queues and bindings (idempotent;
    /// policies come from `topology apply`). A consumer that is not: add it with the
    /// subscription's routes and apply the topology through the management API.
    async fn bind(&self, subscription: &Subscription) -> Result<()> {
        let config = match self.known(&subscription.consumer) {
            Ok(c) => c,
            Err(_) => {
                return self
                    .add_consumer(&subscription.consumer, &subscription.route_refs())
                    .await;
            }
        };
        let ch = self.broker.channel().await?;
        let declared = topology::amqp::declare(&ch, &DesiredTopology::of(&config)).await;
        let _ = ch.close(200, "declared").await;
        declared
    }

    async fn subscribe(&self, subscription: &Subscription) -> Result<BoxSubscriber> {
        subscription.validate()?;
        if self.known(&subscription.consumer).is_err() {
            self.add_consumer(&subscription.consumer, &subscription.route_refs())
                .await?;
        }
        let config = self.config();
        let prefetch = u16::try_from(subscription.prefetch).map_err(|_| {
            Error::new(
                ErrorKind::Config,
                "prefetch must be at most 65535 on RabbitMQ",
            )
        })?;
        // Retries and parking copies go out on a channel of this subscriber's own (on the
        // publishing link): a producer's large batch on the relay's channel never holds them up.
        let settling = Arc::new(ConfirmingPublisher::new(self.publish_link.clone(), &config));
        let mut subscriber = RabbitSubscriber::new(
            self.broker.clone(),
            settling,
            &config,
            &subscription.consumer,
            SubscriberOptions::new(prefetch),
        )?;
        // Attached before this returns: the caller's start-up ends when its consumers are.
        subscriber.attach().await?;
        Ok(BoxSubscriber::new(subscriber))
    }

    async fn dead_letters(&self, consumer: &str) -> Result<Option<BoxSubscriber>> {
        let config = self.known(consumer)?;
        let names = config.names(consumer);
        let mut options = SubscriberOptions::new(32);
        options.queue = Some(names.parking_queue);
        options.dead_letters = true;
        Ok(Some(BoxSubscriber::new(RabbitSubscriber::new(
            self.broker.clone(),
            self.publisher.clone(),
            &config,
            consumer,
            options,
        )?)))
    }

    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        match &self.api {
            Some(api) => {
                RabbitBacklog::new(api.clone(), self.config().prefix)
                    .backlog(consumer)
                    .await
            }
            None => Err(Error::new(
                ErrorKind::Unsupported,
                "RabbitMQ backlog figures need the management API",
            )),
        }
    }

    async fn close(&self) {
        self.broker.close().await;
        self.publish_link.close().await;
    }
}
