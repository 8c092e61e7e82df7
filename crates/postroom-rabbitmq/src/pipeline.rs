//! Pipelines and taps.
//!
//! A [`PipelineStage`] is a [`Handler`] that consumes one message and publishes its outputs
//! through a confirming publisher before the consumer acks the input, so a chain of stages is
//! at least once end to end. Output ids are derived from the input id (UUIDv5), so a stage
//! that crashes between its publish and its ack republishes the *same* ids and the next
//! stage's inbox absorbs the copy.
//!
//! A [`Tap`] is a bounded debugging queue bound next to a stage's queue: the exchange copies
//! the traffic into it; the stage's own queue, acks and confirms are untouched. The tap drops
//! its oldest messages when full (`drop-head`), so it can never push back on producers.

use crate::Broker;
use crate::error::amqp;
use crate::headers::from_field_table;
use crate::management::{ManagementApi, PolicyInfo};
use crate::topology::desired::exact_pattern;
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use postroom_core::{
    Envelope, Handled, Handler, HandlerError, Incoming, MessageId, OutgoingMessage, Publisher,
    ReceivedMessage, Result,
};
use std::sync::Arc;
use std::time::Duration;

/// One output of a stage: an envelope and the topic it goes to.
pub type StageOutput = (Envelope, String);

/// The work of a stage: turn one input into outputs (or fail, with a class).
pub type StageFn =
    dyn Fn(&Envelope) -> std::result::Result<Vec<StageOutput>, HandlerError> + Send + Sync;

/// A consume-and-publish stage.
pub struct PipelineStage {
    name: String,
    publisher: Arc<dyn Publisher>,
    work: Box<StageFn>,
}

impl PipelineStage {
    /// A stage called `name` that publishes with `publisher`.
    pub fn new(
        name: impl Into<String>,
        publisher: Arc<dyn Publisher>,
        work: impl Fn(&Envelope) -> std::result::Result<Vec<StageOutput>, HandlerError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            publisher,
            work: Box::new(work),
        }
    }

    /// The id of output `index` of input `input` in stage `stage`: the same on every repeat.
    #[must_use]
    pub fn output_id(stage: &str, input: MessageId, index: usize) -> MessageId {
        MessageId::from(uuid::Uuid::new_v5(
            &input.as_uuid(),
            format!("{stage}/{index}").as_bytes(),
        ))
    }
}

#[async_trait::async_trait]
impl Handler for PipelineStage {
    async fn handle(&self, m: &Incoming) -> std::result::Result<Handled, HandlerError> {
        let outputs = (self.work)(&m.envelope)?;
        let messages: Vec<OutgoingMessage> = outputs
            .into_iter()
            .enumerate()
            .map(|(i, (mut env, topic))| {
                env.id = Self::output_id(&self.name, m.envelope.id, i);
                OutgoingMessage::from_envelope(&env, topic)
            })
            .collect();
        for r in self.publisher.publish_batch(&messages).await {
            r.map_err(HandlerError::from)?;
        }
        Ok(Handled::Applied)
    }
}

/// A debugging copy of the traffic on an exchange with a binding key.
#[derive(Clone, Debug)]
pub struct Tap {
    api: ManagementApi,
    /// The tap queue.
    pub queue: String,
}

impl Tap {
    /// Bind a new tap queue `name` to `exchange` with `key`, keeping at most `max_messages`.
    pub async fn create(
        api: &ManagementApi,
        name: &str,
        exchange: &str,
        key: &str,
        max_messages: u64,
    ) -> Result<Self> {
        let mut args = serde_json::Map::new();
        args.insert("x-queue-type".into(), "quorum".into());
        let mut def = serde_json::Map::new();
        def.insert("max-length".into(), max_messages.into());
        def.insert("overflow".into(), "drop-head".into());
        api.put_policy(&PolicyInfo {
            name: format!("postroom-tap:{name}"),
            pattern: exact_pattern(name),
            apply_to: "queues".into(),
            definition: def,
            priority: 10,
        })
        .await?;
        api.declare_queue(name, args).await?;
        api.bind(exchange, name, false, key).await?;
        Ok(Self {
            api: api.clone(),
            queue: name.to_string(),
        })
    }

    /// Read up to `max` copies, waiting at most `wait` for each.
    pub async fn read(
        &self,
        broker: &Broker,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<ReceivedMessage>> {
        let ch = broker.channel().await?;
        ch.basic_qos(64, BasicQosOptions::default())
            .await
            .map_err(|e| amqp("setting prefetch", e))?;
        let mut consumer = ch
            .basic_consume(
                &self.queue,
                "",
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| amqp(format!("consuming tap {}", self.queue), e))?;
        let mut out = Vec::new();
        while out.len() < max {
            let Ok(Some(d)) = tokio::time::timeout(wait, consumer.next()).await else {
                break;
            };
            let d = d.map_err(|e| amqp("reading the tap", e))?;
            out.push(
                ReceivedMessage::new(
                    d.properties
                        .message_id()
                        .as_ref()
                        .and_then(|s| s.as_str().parse().ok()),
                    d.routing_key.as_str(),
                    from_field_table(d.properties.headers().as_ref()),
                    d.data.clone(),
                )
                .redelivered(d.redelivered),
            );
            d.acker
                .ack(BasicAckOptions::default())
                .await
                .map_err(|e| amqp("acking a tap copy", e))?;
        }
        let _ = ch.close(200, "tap read").await;
        Ok(out)
    }

    /// Remove the tap (queue and policy).
    pub async fn remove(self) -> Result<()> {
        self.api.delete_queue(&self.queue).await?;
        self.api
            .delete_policy(&format!("postroom-tap:{}", self.queue))
            .await
    }
}
