//! A RabbitMQ workload with a random prefix: the work exchange, one consumer's quorum queues
//! and policies applied through postroom's topology, deleted at the end.

use super::Endpoints;
use crate::error::{BenchError, Context};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueuePurgeOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use postroom_core::OutgoingMessage;
use postroom_core::Transport;
use postroom_rabbitmq::{
    Broker, ConfirmingPublisher, ManagementApi, RabbitSubscriber, RabbitTransport,
    SubscriberOptions, Topology, TopologyConfig,
};
use std::sync::Arc;

/// The consumer name every scenario uses inside its own workload.
pub const CONSUMER: &str = "inventory";
/// The binding of that consumer on the work exchange.
pub const BINDING: &str = "bench.#";

/// One scenario's isolated topology on the shared broker.
pub struct Workload {
    /// Random prefix `prb-<random>-<scenario>`: every name created starts with it.
    pub prefix: String,
    /// The topology configuration.
    pub config: TopologyConfig,
    /// postroom's broker link.
    pub broker: Arc<Broker>,
    /// Management API.
    pub api: ManagementApi,
    /// postroom's transport on the workload (on `broker`, its publisher on a link of its
    /// own, made when first used).
    pub transport: RabbitTransport,
    /// A raw lapin connection for baselines and setup (re-made if the broker dropped it).
    raw: tokio::sync::Mutex<Connection>,
    endpoints: Endpoints,
    deleted: bool,
}

super::debug_by_prefix!(Workload);

impl Workload {
    /// Declare a workload for `scenario` with retry `ladder` (e.g. `1s,2s`).
    pub async fn create(
        endpoints: &Endpoints,
        scenario: &str,
        ladder: &str,
    ) -> Result<Self, BenchError> {
        let prefix = format!("prb-{}-{scenario}", super::rand_suffix());
        let config = TopologyConfig {
            prefix: prefix.clone(),
            exchange: format!("{prefix}.orders"),
            ladder: ladder
                .parse()
                .map_err(|e| BenchError::Config(format!("retry ladder {ladder:?}: {e}")))?,
            delivery_limit: 50,
            ..TopologyConfig::default()
        }
        .with_consumer(CONSUMER, &[BINDING]);
        let unavailable = |what: &'static str, url: &str, e: String| BenchError::Unavailable {
            server: what,
            url: postroom_ops::redact(url),
            message: e,
        };
        let api =
            ManagementApi::new(&endpoints.rabbit_api, &config.vhost).ctx("management API URL")?;
        let options = postroom_rabbitmq::BrokerOptions {
            publisher_channels: endpoints.publisher_channels,
            ..Default::default()
        };
        let broker = Broker::connect_with(&endpoints.amqp, options)
            .await
            .map_err(|e| unavailable("RabbitMQ", &endpoints.amqp, e.to_string()))?;
        let raw = Connection::connect(&endpoints.amqp, ConnectionProperties::default())
            .await
            .map_err(|e| unavailable("RabbitMQ", &endpoints.amqp, e.to_string()))?;
        let transport = RabbitTransport::new(broker.clone(), config.clone(), Some(api.clone()))
            .ctx("RabbitMQ transport")?;
        let w = Self {
            prefix,
            config,
            broker,
            api,
            transport,
            raw: tokio::sync::Mutex::new(raw),
            endpoints: endpoints.clone(),
            deleted: false,
        };
        let topology = Topology::new(w.config.clone(), w.api.clone()).ctx("topology")?;
        topology.apply().await.map_err(|e| {
            unavailable(
                "the RabbitMQ management API",
                &endpoints.rabbit_api,
                e.to_string(),
            )
        })?;
        w.broker.redeclare_on_reconnect(topology.desired());
        Ok(w)
    }

    /// The consumer's work queue.
    #[must_use]
    pub fn work_queue(&self) -> String {
        self.config.names(CONSUMER).work_queue
    }

    /// A confirming publisher on postroom's link.
    #[must_use]
    pub fn publisher(&self) -> Arc<ConfirmingPublisher> {
        Arc::new(ConfirmingPublisher::new(self.broker.clone(), &self.config))
    }

    /// postroom's subscriber on the work queue.
    pub fn subscriber(&self, prefetch: u16) -> Result<RabbitSubscriber, BenchError> {
        RabbitSubscriber::new(
            self.broker.clone(),
            self.publisher(),
            &self.config,
            CONSUMER,
            SubscriberOptions::new(prefetch),
        )
        .ctx("subscriber")
    }

    /// A channel on the raw connection, reconnecting first if the broker dropped it.
    pub async fn raw_channel(&self) -> Result<Channel, BenchError> {
        let mut conn = self.raw.lock().await;
        if !conn.status().connected() {
            *conn = Connection::connect(&self.endpoints.amqp, ConnectionProperties::default())
                .await
                .ctx("reconnecting the raw connection")?;
        }
        conn.create_channel().await.ctx("raw channel")
    }

    /// A raw consumer of the work queue named `tag`, `prefetch` deliveries at a time, and its
    /// channel.
    pub async fn raw_consumer(
        &self,
        prefetch: u16,
        tag: &str,
    ) -> Result<(Channel, lapin::Consumer), BenchError> {
        let ch = self.raw_channel().await?;
        ch.basic_qos(prefetch, lapin::options::BasicQosOptions::default())
            .await
            .ctx("raw qos")?;
        let consumer = ch
            .basic_consume(
                &self.work_queue(),
                tag,
                lapin::options::BasicConsumeOptions::default(),
                lapin::types::FieldTable::default(),
            )
            .await
            .ctx("raw consume")?;
        Ok((ch, consumer))
    }

    /// A raw confirm-mode channel.
    pub async fn raw_confirm_channel(&self) -> Result<Channel, BenchError> {
        let ch = self.raw_channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .ctx("raw confirm mode")?;
        Ok(ch)
    }

    /// Empty the work queue; returns how many messages it held.
    pub async fn purge(&self) -> Result<u32, BenchError> {
        let ch = self.raw_channel().await?;
        let n = ch
            .queue_purge(&self.work_queue(), QueuePurgeOptions::default())
            .await
            .ctx("purging the work queue")?;
        let _ = ch.close(200, "done").await;
        Ok(n)
    }

    /// Publish `messages` to the work exchange on `ch` (confirm mode), `window` in flight at a
    /// time: the raw lapin loop the relay is compared with, and the producer of consumer runs.
    pub async fn raw_publish(
        &self,
        ch: &Channel,
        messages: &[OutgoingMessage],
        window: usize,
    ) -> Result<(), BenchError> {
        raw_publish(ch, &self.config.exchange, messages, window).await
    }

    /// Close the links and delete every queue, exchange and policy of the workload.
    pub async fn delete(mut self) -> Result<(), BenchError> {
        self.deleted = true;
        self.transport.close().await;
        let _ = self.raw.lock().await.close(200, "bench done").await;
        self.api
            .delete_everything_named(&self.prefix)
            .await
            .ctx("deleting the bench workload")?;
        Ok(())
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        let (prefix, url, vhost) = (
            self.prefix.clone(),
            self.endpoints.rabbit_api.clone(),
            self.config.vhost.clone(),
        );
        let _ = std::thread::spawn(move || {
            if let (Ok(rt), Ok(api)) = (
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build(),
                ManagementApi::new(&url, &vhost),
            ) {
                // The broker may be briefly unreachable (that may be why the scenario failed):
                // try for a while before leaving the names behind.
                for attempt in 0..10 {
                    if rt.block_on(api.delete_everything_named(&prefix)).is_ok() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_secs(1 + attempt / 3));
                }
                eprintln!("postroom-bench: could not delete RabbitMQ objects named {prefix}*");
            }
        })
        .join();
    }
}

/// Publish `messages` to `exchange` with mandatory, persistent, message id and headers,
/// `window` in flight; fails on a nack or a return.
pub async fn raw_publish(
    ch: &Channel,
    exchange: &str,
    messages: &[OutgoingMessage],
    window: usize,
) -> Result<(), BenchError> {
    for chunk in messages.chunks(window.max(1)) {
        let mut pending = Vec::with_capacity(chunk.len());
        for m in chunk {
            let mut headers = FieldTable::default();
            for (k, v) in &m.headers {
                headers.insert(
                    ShortString::from(k.clone()),
                    AMQPValue::LongString(v.as_str().into()),
                );
            }
            let props = BasicProperties::default()
                .with_message_id(m.id.to_string().into())
                .with_delivery_mode(2)
                .with_content_type("application/json".into())
                .with_headers(headers);
            let confirm = ch
                .basic_publish(
                    exchange,
                    m.route.as_str(),
                    BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    },
                    &m.body,
                    props,
                )
                .await
                .ctx("raw publish")?;
            pending.push(confirm);
        }
        for c in futures::future::join_all(pending).await {
            match c.ctx("raw confirm")? {
                Confirmation::Ack(None) => {}
                other => {
                    return Err(BenchError::Stalled(format!(
                        "raw publish not confirmed cleanly: {other:?}"
                    )));
                }
            }
        }
    }
    Ok(())
}

#[postroom_core::async_trait]
impl super::BrokerWorkload for Workload {
    async fn create(ctx: &crate::Ctx, scenario: &str) -> Result<Self, BenchError> {
        Workload::create(&ctx.endpoints, scenario, "5s").await
    }

    fn transport(&self) -> &dyn postroom_core::Transport {
        &self.transport
    }

    async fn delete(self) -> Result<(), BenchError> {
        Workload::delete(self).await
    }
}
