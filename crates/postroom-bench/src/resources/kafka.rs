//! A Kafka workload with a random prefix: the bench topic and one consumer's topics created
//! through postroom's topology, a raw rdkafka producer of the same settings for baselines, and
//! every topic deleted at the end.

use super::Endpoints;
use super::rabbit::CONSUMER;
use crate::error::{BenchError, Context};
use crate::payload::ROUTING_KEY;
use postroom_core::message::headers as h;
use postroom_core::{OutgoingMessage, Transport};
use postroom_kafka::headers::to_record;
use postroom_kafka::naming::topic_of;
use postroom_kafka::topology::{Consumers, Topology, admin, delete_topics};
use postroom_kafka::{KafkaConfig, KafkaTransport};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

/// One scenario's isolated topics on the shared broker.
pub struct Workload {
    /// Random prefix `prk-<random>-<scenario>`: every topic created starts with it.
    pub prefix: String,
    /// The settings of postroom's transport.
    pub config: KafkaConfig,
    /// postroom's transport.
    pub transport: KafkaTransport,
}

super::debug_by_prefix!(Workload);

impl Workload {
    /// Create the topics of `scenario`: the bench route's topic and the consumer's, one
    /// partition each.
    pub async fn create(endpoints: &Endpoints, scenario: &str) -> Result<Self, BenchError> {
        let prefix = format!("prk-{}-{scenario}", super::rand_suffix());
        let config = KafkaConfig::new(endpoints.kafka.clone())
            .prefix(prefix.clone())
            .ladder(postroom_core::RetryLadder::default());
        let probe: BaseConsumer = config
            .client_config()
            .create()
            .map_err(|e| BenchError::Config(format!("Kafka client: {e}")))?;
        probe
            .fetch_metadata(None, Duration::from_secs(10))
            .map_err(|e| BenchError::Unavailable {
                server: "Kafka",
                url: endpoints.kafka.clone(),
                message: e.to_string(),
            })?;
        Topology::new(&config, Consumers::default().with(CONSUMER, &[ROUTING_KEY]))
            .ctx("Kafka topology")?
            .apply()
            .await
            .ctx("creating the bench topics")?;
        let transport = KafkaTransport::new(config.clone()).ctx("Kafka transport")?;
        let w = Self {
            prefix,
            config,
            transport,
        };
        // The producer learns where the topics are before anything is timed.
        w.bind(1).await?;
        Ok(w)
    }

    /// The topic the bench messages go to.
    #[must_use]
    pub fn topic(&self) -> String {
        topic_of(&self.prefix, ROUTING_KEY)
    }

    /// A raw producer with the settings of postroom's (idempotent, `acks=all`, the same
    /// linger).
    pub fn raw_producer(&self) -> Result<FutureProducer, BenchError> {
        let mut c = self.config.client_config();
        c.set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "2")
            .set("message.timeout.ms", "30000");
        c.create()
            .map_err(|e| BenchError::Config(format!("raw Kafka producer: {e}")))
    }

    /// Publish `msgs` to the bench topic with `producer`, `window` in flight at a time, each
    /// window waited for (the relay's batch); key and headers as postroom sends them.
    pub async fn raw_publish(
        &self,
        producer: &FutureProducer,
        msgs: &[OutgoingMessage],
        window: usize,
    ) -> Result<(), BenchError> {
        let topic = self.topic();
        for chunk in msgs.chunks(window.max(1)) {
            let mut pending = Vec::with_capacity(chunk.len());
            for m in chunk {
                let mut record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&topic)
                    .payload(m.body.as_slice())
                    .headers(to_record(m.id, &m.headers));
                if let Some(k) = m.headers.get(h::AGGREGATE_KEY) {
                    record = record.key(k);
                }
                let f = producer
                    .send_result(record)
                    .map_err(|(e, _)| BenchError::Stalled(format!("raw enqueue: {e}")))?;
                pending.push(f);
            }
            for f in pending {
                f.await
                    .map_err(|_| BenchError::Stalled("raw producer went away".into()))?
                    .map_err(|(e, _)| BenchError::Stalled(format!("raw publish: {e}")))?;
            }
        }
        Ok(())
    }

    /// Delete every topic of the workload.
    pub async fn delete(&self) -> Result<(), BenchError> {
        let topology = Topology::new(&self.config, Consumers::default()).ctx("Kafka topology")?;
        let ours: Vec<String> = topology
            .existing()
            .await
            .ctx("listing topics")?
            .into_keys()
            .filter(|t| t.starts_with(&format!("{}.", self.prefix)))
            .collect();
        let admin = admin(&self.config).ctx("Kafka admin")?;
        delete_topics(&admin, &ours)
            .await
            .ctx("deleting the bench topics")
    }

    /// The consumer's topics exist for this subscription.
    pub async fn bind(&self, prefetch: u16) -> Result<(), BenchError> {
        self.transport
            .bind(&super::bench_subscription(ROUTING_KEY, prefetch))
            .await
            .ctx("binding the bench consumer")
    }
}

#[postroom_core::async_trait]
impl super::BrokerWorkload for Workload {
    async fn create(ctx: &crate::Ctx, scenario: &str) -> Result<Self, BenchError> {
        Workload::create(&ctx.endpoints, scenario).await
    }

    fn transport(&self) -> &dyn postroom_core::Transport {
        &self.transport
    }

    async fn delete(self) -> Result<(), BenchError> {
        Workload::delete(&self).await
    }
}
