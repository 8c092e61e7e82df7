//! A NATS JetStream workload with a random prefix: the work stream, one consumer's durables
//! and its parking stream through postroom's topology, deleted at the end; and the raw
//! async-nats calls of the baselines (publish with `Nats-Msg-Id` and wait for the PubAcks,
//! pull from the consumer's durable).

use super::Endpoints;
use super::rabbit::CONSUMER;
use crate::error::{BenchError, Context};
use crate::payload::ROUTING_KEY;
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::PullConsumer;
use postroom_core::{BoxSubscriber, OutgoingMessage, Transport};
use postroom_nats::headers::{MESSAGE_ID, NATS_MSG_ID};
use postroom_nats::naming::{lanes, topic_subject};
use postroom_nats::topology::reset::delete_workload;
use postroom_nats::{JetStreamPublisher, NatsConfig, NatsConnection, NatsTransport, Topology};
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

/// One scenario's isolated streams on the shared server.
pub struct NatsWorkload {
    /// Random prefix `prb_<random>_<scenario>`: the work stream's name and subject root.
    pub prefix: String,
    /// The topology configuration.
    pub config: NatsConfig,
    /// postroom's connection and transport.
    pub transport: Arc<NatsTransport>,
    /// A connection of the baselines' own.
    raw: NatsConnection,
    url: String,
    deleted: bool,
}

super::debug_by_prefix!(NatsWorkload);

impl NatsWorkload {
    /// Create the workload of `scenario`.
    pub async fn create(endpoints: &Endpoints, scenario: &str) -> Result<Self, BenchError> {
        let prefix = format!("prb_{}_{scenario}", super::rand_suffix());
        // The one topic the bench publishes: one route durable, pulled by both sides.
        let config = NatsConfig::new(&prefix).with_consumer(CONSUMER, &[ROUTING_KEY]);
        let connect = async |name: &str| {
            NatsConnection::connect(&endpoints.nats, name)
                .await
                .map_err(|e| BenchError::Unavailable {
                    server: "NATS JetStream",
                    url: postroom_ops::redact(&endpoints.nats),
                    message: e.to_string(),
                })
        };
        let conn = connect("postroom-bench").await?;
        let raw = connect("raw-bench").await?;
        Topology::new(conn.clone(), config.clone())
            .ctx("NATS topology")?
            .apply()
            .await
            .ctx("applying the NATS topology")?;
        let transport = Arc::new(NatsTransport::new(conn, config.clone()).ctx("NATS transport")?);
        Ok(Self {
            prefix,
            config,
            transport,
            raw,
            url: endpoints.nats.clone(),
            deleted: false,
        })
    }

    /// The confirming publisher postroom's relay uses.
    #[must_use]
    pub fn publisher(&self) -> Arc<JetStreamPublisher> {
        self.transport.jetstream_publisher().clone()
    }

    /// postroom's subscriber of the consumer.
    pub async fn subscriber(&self, prefetch: u16) -> Result<BoxSubscriber, BenchError> {
        self.transport
            .subscribe(&super::bench_subscription(ROUTING_KEY, prefetch))
            .await
            .ctx("NATS subscriber")
    }

    /// The consumer's durable on the route (what both sides pull from).
    pub async fn raw_consumer(&self) -> Result<PullConsumer, BenchError> {
        let consumer = self
            .config
            .consumer(CONSUMER)
            .ok_or_else(|| BenchError::Config("the bench consumer is missing".into()))?;
        let durable = lanes(&self.config, consumer)
            .into_iter()
            .find(|l| !l.direct)
            .ok_or_else(|| BenchError::Config("the bench consumer has no route durable".into()))?
            .durable;
        let stream = self
            .raw
            .jetstream()
            .get_stream(&self.prefix)
            .await
            .map_err(|e| BenchError::Stalled(format!("raw: the work stream: {e}")))?;
        stream
            .get_consumer(&durable)
            .await
            .map_err(|e| BenchError::Stalled(format!("raw: durable {durable}: {e}")))
    }

    /// Publish `messages` on the raw connection, each with `Nats-Msg-Id` = its id (what the
    /// relay's guarantee needs, so both sides ask the same of the server), `window` in flight
    /// at a time, waiting for every PubAck of a window before the next.
    pub async fn raw_publish(
        &self,
        messages: &[OutgoingMessage],
        window: usize,
    ) -> Result<(), BenchError> {
        let js = self.raw.jetstream();
        for chunk in messages.chunks(window.max(1)) {
            let mut acks = Vec::with_capacity(chunk.len());
            for m in chunk {
                let mut headers = HeaderMap::new();
                for (k, v) in &m.headers {
                    headers.insert(k.as_str(), v.as_str());
                }
                let id = m.id.to_string();
                headers.insert(MESSAGE_ID, id.as_str());
                headers.insert(NATS_MSG_ID, id.as_str());
                let ack = js
                    .publish_with_headers(
                        topic_subject(&self.prefix, m.route.as_str(), None),
                        headers,
                        bytes::Bytes::from(m.body.clone()),
                    )
                    .await
                    .map_err(|e| BenchError::Stalled(format!("raw publish: {e}")))?;
                acks.push(ack.into_future());
            }
            for ack in futures::future::join_all(acks).await {
                let ack = ack.map_err(|e| BenchError::Stalled(format!("raw PubAck: {e}")))?;
                if ack.duplicate {
                    return Err(BenchError::Stalled(format!(
                        "raw publish: sequence {} taken for a duplicate",
                        ack.sequence
                    )));
                }
            }
        }
        Ok(())
    }

    /// Empty the work stream; returns how many messages it held.
    pub async fn purge(&self) -> Result<u64, BenchError> {
        let mut stream = self
            .raw
            .jetstream()
            .get_stream(&self.prefix)
            .await
            .map_err(|e| BenchError::Stalled(format!("the work stream: {e}")))?;
        let held = stream
            .info()
            .await
            .map_err(|e| BenchError::Stalled(format!("work stream info: {e}")))?
            .state
            .messages;
        stream
            .purge()
            .await
            .map_err(|e| BenchError::Stalled(format!("purging the work stream: {e}")))?;
        Ok(held)
    }

    /// Close the connections and delete the workload's streams.
    pub async fn delete(mut self) -> Result<(), BenchError> {
        self.deleted = true;
        delete_workload(&self.raw, &self.prefix)
            .await
            .ctx("deleting the NATS bench workload")?;
        self.transport.close().await;
        self.raw.close().await;
        Ok(())
    }
}

impl Drop for NatsWorkload {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        let (url, prefix) = (self.url.clone(), self.prefix.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            for attempt in 0..5 {
                let deleted = rt.block_on(async {
                    let conn = NatsConnection::connect(&url, "postroom-bench-cleanup").await?;
                    delete_workload(&conn, &prefix).await
                });
                if deleted.is_ok() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1 + attempt));
            }
            eprintln!("postroom-bench: could not delete the NATS streams of {prefix}");
        })
        .join();
    }
}

#[postroom_core::async_trait]
impl super::BrokerWorkload for NatsWorkload {
    async fn create(ctx: &crate::Ctx, scenario: &str) -> Result<Self, BenchError> {
        NatsWorkload::create(&ctx.endpoints, scenario).await
    }

    fn transport(&self) -> &dyn postroom_core::Transport {
        self.transport.as_ref()
    }

    async fn delete(self) -> Result<(), BenchError> {
        NatsWorkload::delete(self).await
    }
}
