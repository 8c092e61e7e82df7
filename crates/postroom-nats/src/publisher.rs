//! The confirming publisher: every message carries `Nats-Msg-Id`, and a publish succeeds only
//! on the stream's PubAck. A PubAck flagged duplicate is a success too: the stream already
//! holds that copy (a relay that died between publish and mark and published again). Batches
//! keep every publish in flight at once and match each PubAck to its message.

use crate::config::NatsConfig;
use crate::connection::{NatsConnection, TRANSPORT};
use crate::error::from_publish;
use crate::headers::to_nats;
use crate::naming::{direct_subject, partition_of, topic_subject};
use async_nats::jetstream::context::PublishAckFuture;
use postroom_core::message::headers as h;
use postroom_core::metrics as m;
use postroom_core::{Error, ErrorKind, OutgoingMessage, Publisher, Result, Route};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// Publishes to a workload's work stream and confirms by PubAck.
#[derive(Clone, Debug)]
pub struct JetStreamPublisher {
    conn: NatsConnection,
    config: Arc<RwLock<NatsConfig>>,
}

/// Where a message goes and under which deduplication key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// Subject.
    pub subject: String,
    /// `Nats-Msg-Id` (`None` when the workload does not deduplicate).
    pub dedup_key: Option<String>,
}

impl JetStreamPublisher {
    /// A publisher for the workload of `config`.
    #[must_use]
    pub fn new(conn: NatsConnection, config: Arc<RwLock<NatsConfig>>) -> Self {
        Self { conn, config }
    }

    /// The subject and deduplication key of `message`. A topic goes to `<prefix>.<topic>`
    /// (plus its partition word in a partitioned workload) under its id; a copy for one
    /// consumer (redrive) goes to that consumer's direct subject under a key that counts the
    /// redrive, so a later redrive of the same id is not taken for a duplicate.
    pub fn address(&self, message: &OutgoingMessage) -> Result<Address> {
        let config = self
            .config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &message.route {
            Route::Topic(topic) => {
                check_topic(topic)?;
                let parts = config.partitions();
                let partition = (parts > 0).then(|| {
                    let key = message
                        .headers
                        .get(h::AGGREGATE_KEY)
                        .cloned()
                        .unwrap_or_else(|| message.id.to_string());
                    partition_of(&key, parts)
                });
                Ok(Address {
                    subject: topic_subject(&config.prefix, topic, partition),
                    dedup_key: config.deduplicate.then(|| message.id.to_string()),
                })
            }
            Route::Consumer(consumer) => {
                if !crate::config::valid_name(consumer) {
                    return Err(Error::new(
                        ErrorKind::InvalidData,
                        format!("{consumer:?} is not a NATS consumer name"),
                    ));
                }
                let redrives = message
                    .headers
                    .get(h::REDRIVE_COUNT)
                    .map_or("0", String::as_str);
                Ok(Address {
                    subject: direct_subject(&config.prefix, consumer),
                    dedup_key: config
                        .deduplicate
                        .then(|| format!("{}:{consumer}:r{redrives}", message.id)),
                })
            }
        }
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<PublishAckFuture> {
        let addr = self.address(message)?;
        let headers = to_nats(message.id, addr.dedup_key.as_deref(), &message.headers)?;
        self.conn
            .jetstream()
            .publish_with_headers(
                addr.subject.clone(),
                headers,
                bytes::Bytes::from(message.body.clone()),
            )
            .await
            .map_err(|e| {
                from_publish(
                    &format!("publishing {} to {}", message.id, addr.subject),
                    &e,
                )
            })
    }

    async fn confirm(message: &OutgoingMessage, ack: PublishAckFuture) -> Result<()> {
        match ack.await {
            Ok(ack) => {
                if ack.duplicate {
                    tracing::debug!(id = %message.id, seq = ack.sequence, "the stream already held this copy: confirmed as a duplicate");
                }
                Ok(())
            }
            Err(e) => Err(from_publish(
                &format!("waiting for the PubAck of {}", message.id),
                &e,
            )),
        }
    }
}

/// Refuse a topic that cannot be a NATS subject.
fn check_topic(topic: &str) -> Result<()> {
    if topic.is_empty()
        || topic.split('.').any(str::is_empty)
        || topic
            .chars()
            .any(|c| c.is_whitespace() || c == '*' || c == '>')
    {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!(
                "topic {topic:?} is not a NATS subject: words separated by '.', no wildcards or whitespace"
            ),
        ));
    }
    Ok(())
}

#[async_trait::async_trait]
impl Publisher for JetStreamPublisher {
    async fn publish(&self, message: &OutgoingMessage) -> Result<()> {
        let started = Instant::now();
        let ack = self.send(message).await?;
        let r = Self::confirm(message, ack).await;
        metrics::histogram!(m::CONFIRM_SECONDS, "transport" => TRANSPORT)
            .record(started.elapsed().as_secs_f64());
        r
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        let started = Instant::now();
        let mut sent = Vec::with_capacity(messages.len());
        for m in messages {
            sent.push(self.send(m).await);
        }
        let results =
            futures::future::join_all(messages.iter().zip(sent).map(|(m, s)| async move {
                match s {
                    Ok(ack) => Self::confirm(m, ack).await,
                    Err(e) => Err(e),
                }
            }))
            .await;
        metrics::histogram!(m::CONFIRM_SECONDS, "transport" => TRANSPORT)
            .record(started.elapsed().as_secs_f64());
        results
    }
}
