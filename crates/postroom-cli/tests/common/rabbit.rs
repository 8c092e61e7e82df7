//! A RabbitMQ workload for one test: its topology file written and applied through the
//! management API, a connection and a confirming publisher; deleted by [`ParkingPlace::close`].

use super::parking::{CONSUMER, CONSUMER_TOML, ParkingPlace};
use postroom_core::{BoxSubscriber, Publisher, async_trait};
use std::path::Path;
use std::sync::Arc;

/// The workload `prcli-<tag>-…` of [`CONSUMER`] on `t.#`, on the test broker.
pub struct RabbitWorkload {
    /// Its prefix.
    pub prefix: String,
    /// Its topology.
    pub config: postroom_rabbitmq::TopologyConfig,
    /// The connection.
    pub broker: Arc<postroom_rabbitmq::Broker>,
    /// A confirming publisher on it.
    pub publisher: Arc<postroom_rabbitmq::ConfirmingPublisher>,
}

impl RabbitWorkload {
    /// A subscriber of [`CONSUMER`]'s work queue.
    pub fn subscriber(&self, prefetch: u16) -> postroom_rabbitmq::RabbitSubscriber {
        postroom_rabbitmq::RabbitSubscriber::new(
            self.broker.clone(),
            self.publisher.clone(),
            &self.config,
            CONSUMER,
            postroom_rabbitmq::SubscriberOptions::new(prefetch),
        )
        .unwrap()
    }
}

#[async_trait]
impl ParkingPlace for RabbitWorkload {
    /// Write `topology.toml` in `dir`, apply it, connect.
    async fn start(dir: &Path, tag: &str) -> Self {
        let prefix = super::workload(tag);
        let toml =
            format!("prefix = \"{prefix}\"\nexchange = \"{prefix}.orders\"\n{CONSUMER_TOML}");
        std::fs::write(dir.join("topology.toml"), &toml).unwrap();
        let config = postroom_rabbitmq::TopologyConfig::from_toml(&toml).unwrap();
        postroom_rabbitmq::Topology::new(config.clone(), super::management_api())
            .unwrap()
            .apply()
            .await
            .unwrap();
        let broker = postroom_rabbitmq::Broker::connect(&super::amqp())
            .await
            .unwrap();
        let publisher = Arc::new(postroom_rabbitmq::ConfirmingPublisher::new(
            broker.clone(),
            &config,
        ));
        Self {
            prefix,
            config,
            broker,
            publisher,
        }
    }

    fn url(&self) -> String {
        super::amqp()
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.publisher.clone()
    }

    async fn subscribe(&self, prefetch: u16) -> BoxSubscriber {
        BoxSubscriber::new(self.subscriber(prefetch))
    }

    /// Close the connection and delete the workload's queues, exchanges and policies.
    async fn close(self) {
        self.broker.close().await;
        super::cleanup(&self.prefix).await;
    }
}
