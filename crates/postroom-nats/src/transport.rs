//! NATS JetStream as a postroom [`Transport`]: any delay up to `max_delay` (a delayed nak),
//! deliveries counted by the server with `max_deliver` as its limit, ownership kept by
//! Progress heartbeats up to `max_in_progress`, per-key order for partitioned consumers.

use crate::config::NatsConfig;
use crate::connection::NatsConnection;
use crate::dead_letters::DeadLetterSubscriber;
use crate::naming::{self, Lane};
use crate::publisher::JetStreamPublisher;
use crate::retry_book::RetryBook;
use crate::subscriber::NatsSubscriber;
use crate::subscriber::received::Describe;
use crate::topology::Topology;
use postroom_core::{
    Backlog, BoxSubscriber, Capabilities, DelayCapability, Error, ErrorKind, KeyOrdering,
    Publisher, RedeliveryCounting, Result, Subscription, Transport, async_trait,
};
use std::sync::{Arc, RwLock};

/// One workload on JetStream.
pub struct NatsTransport {
    conn: NatsConnection,
    config: Arc<RwLock<NatsConfig>>,
    publisher: Arc<JetStreamPublisher>,
    book: Arc<RetryBook>,
}

impl std::fmt::Debug for NatsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTransport")
            .field("prefix", &self.config().prefix)
            .finish_non_exhaustive()
    }
}

impl NatsTransport {
    /// The workload of `config` on `conn`. Nothing is created until a consumer binds (or
    /// [`Topology::apply`] runs).
    pub fn new(conn: NatsConnection, config: NatsConfig) -> Result<Self> {
        config.validate()?;
        let config = Arc::new(RwLock::new(config));
        let publisher = Arc::new(JetStreamPublisher::new(conn.clone(), config.clone()));
        Ok(Self {
            conn,
            config,
            publisher,
            book: Arc::new(RetryBook::default()),
        })
    }

    /// The configuration now (consumers that bound at run time included).
    #[must_use]
    pub fn config(&self) -> NatsConfig {
        self.config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The connection.
    #[must_use]
    pub fn connection(&self) -> &NatsConnection {
        &self.conn
    }

    /// The confirming publisher.
    #[must_use]
    pub fn jetstream_publisher(&self) -> &Arc<JetStreamPublisher> {
        &self.publisher
    }

    /// The topology of the configuration now.
    pub fn topology(&self) -> Result<Topology> {
        Topology::new(self.conn.clone(), self.config())
    }

    /// The configuration with `subscription`'s consumer in it (added with its routes when
    /// the topology does not list it).
    fn with_consumer(&self, subscription: &Subscription) -> Result<NatsConfig> {
        let mut guard = self
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.consumer(&subscription.consumer).is_none() {
            let next = guard
                .clone()
                .with_consumer(&subscription.consumer, &subscription.route_refs());
            next.validate()?;
            *guard = next;
        }
        Ok(guard.clone())
    }

    fn known(&self, consumer: &str) -> Result<NatsConfig> {
        let config = self.config();
        if config.consumer(consumer).is_some() {
            Ok(config)
        } else {
            Err(Error::new(
                ErrorKind::Config,
                format!(
                    "consumer {consumer:?} is not in the NATS topology (prefix {:?}); add it to the topology's consumers or subscribe it first",
                    config.prefix
                ),
            ))
        }
    }
}

#[async_trait]
impl Transport for NatsTransport {
    fn name(&self) -> &'static str {
        "nats"
    }

    fn capabilities(&self) -> Capabilities {
        let config = self.config();
        Capabilities {
            delay: DelayCapability::UpTo(config.max_delay),
            redelivery: RedeliveryCounting {
                counted: true,
                native_limit: Some(config.max_deliver),
            },
            // Progress heartbeats keep a delivery owned while its handler runs, up to this.
            ownership: Some(config.max_in_progress),
            ordering: if config.partitions() > 0 {
                KeyOrdering::Partitioned
            } else {
                KeyOrdering::None
            },
            max_message_bytes: self.conn.max_payload(),
        }
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.publisher.clone()
    }

    /// Create or update the consumer's part of the topology: the work stream, its parking
    /// stream (capturing its durables' advisories), its durables and the ingest durable.
    async fn bind(&self, subscription: &Subscription) -> Result<()> {
        let config = self.with_consumer(subscription)?;
        Topology::new(self.conn.clone(), config.only(&subscription.consumer))?
            .apply()
            .await?;
        Ok(())
    }

    async fn subscribe(&self, subscription: &Subscription) -> Result<BoxSubscriber> {
        subscription.validate()?;
        self.bind(subscription).await?;
        let config = self.config();
        let mut subscriber = NatsSubscriber::start(
            self.conn.clone(),
            &config,
            &subscription.consumer,
            subscription.prefetch,
            self.book.clone(),
        )?;
        // Attached before this returns: the caller's start-up ends when its consumers are.
        subscriber.attach().await?;
        Ok(BoxSubscriber::new(subscriber))
    }

    async fn dead_letters(&self, consumer: &str) -> Result<Option<BoxSubscriber>> {
        let config = self.known(consumer)?;
        let only = config.only(consumer);
        Topology::new(self.conn.clone(), only.clone())?
            .apply()
            .await?;
        let lane = Lane {
            durable: naming::INGEST_DURABLE.into(),
            filter: String::new(),
            checks: Vec::new(),
            partition: None,
            direct: false,
        };
        let describe = Describe {
            prefix: config.prefix.clone(),
            partitioned: false,
            consumer: consumer.to_string(),
            raw: true,
        };
        let inner = NatsSubscriber::spawn(
            self.conn.clone(),
            only,
            naming::parking_stream(&config.prefix, consumer),
            vec![lane],
            describe,
            32,
            self.book.clone(),
        );
        Ok(Some(BoxSubscriber::new(DeadLetterSubscriber::new(
            inner,
            self.conn.clone(),
            &config.prefix,
            consumer,
        ))))
    }

    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        let config = self.known(consumer)?;
        crate::backlog::backlog(&self.conn, &config, consumer).await
    }

    async fn close(&self) {
        self.conn.close().await;
    }
}
