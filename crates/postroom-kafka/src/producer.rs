//! The confirming producer: librdkafka's idempotent producer (`enable.idempotence=true`,
//! `acks=all`). A publish succeeds only on its delivery report; a batch is enqueued in order
//! (one key stays in one partition, in order) with every record in flight at once, each
//! matched to its own report. A fatal producer error (idempotence broken, a fenced producer)
//! makes the instance useless: it is replaced, and every record it had not confirmed comes
//! back as an error, so the relay leaves those rows unmarked and publishes them again with the
//! same ids (the idempotence of one producer session cannot cover them; the inbox does).

use crate::config::KafkaConfig;
use crate::error::kafka;
use crate::headers::to_record;
use crate::naming::{ConsumerTopics, topic_of};
use postroom_core::message::headers as h;
use postroom_core::metrics as m;
use postroom_core::{
    Error, ErrorKind, Headers, MessageId, OutgoingMessage, Publisher, Result, Route,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Transport label in metrics.
pub(crate) const TRANSPORT: &str = "kafka";

/// The largest record (body, key and headers) postroom publishes for a producer: a relay's
/// row, a redrive. It is a little under what a Kafka broker takes by default
/// ([`MAX_RECORD_BYTES`]): a consumer's retry and parking copies carry more headers than the
/// original (the attempt, the error text, every diagnostic), and a record that was accepted
/// must always be retried and parked, never handed back to its partition for want of room.
pub const MAX_MESSAGE_BYTES: usize = 1_000_000;

/// The largest record the producer sends at all, copies included: a broker's default
/// `message.max.bytes`.
pub const MAX_RECORD_BYTES: usize = 1_048_588;

/// The size librdkafka counts for a record of `body`, `key` and `headers` (their names and
/// values, the message id header included), give or take a few bytes of framing per header.
fn record_bytes(m: &OutgoingMessage) -> usize {
    let key = m.headers.get(h::AGGREGATE_KEY).map_or(0, String::len);
    let headers: usize = m.headers.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    m.body.len() + key + headers + crate::headers::MESSAGE_ID.len() + 36 + 2
}

/// Refuse a message over [`MAX_MESSAGE_BYTES`]: the broker could take it, but not its retry
/// or parking copies.
fn check_size(m: &OutgoingMessage) -> Result<()> {
    let size = record_bytes(m);
    if size > MAX_MESSAGE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!(
                "message {} is {size} bytes with its key and headers; postroom publishes at most {MAX_MESSAGE_BYTES} to Kafka (under the broker's default {MAX_RECORD_BYTES}, which its retry and parking copies need)",
                m.id
            ),
        ));
    }
    Ok(())
}

/// One record to one topic.
#[derive(Clone, Copy, Debug)]
pub struct Outbound<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Kafka key (the aggregate key): one key stays in one partition.
    pub key: Option<&'a str>,
    /// Stable id, sent as the `x-message-id` header.
    pub id: MessageId,
    /// Headers.
    pub headers: &'a Headers,
    /// Body.
    pub body: &'a [u8],
}

struct Session {
    producer: FutureProducer,
    number: u64,
}

/// The idempotent, confirming producer of one workload.
pub struct KafkaProducer {
    config: KafkaConfig,
    session: RwLock<Arc<Session>>,
}

postroom_core::debug_showing!(KafkaProducer {
    prefix: config.prefix
});

impl KafkaProducer {
    /// A producer for `config` (no connection is made until the first record).
    pub fn new(config: &KafkaConfig) -> Result<Self> {
        config.validate()?;
        let producer = build(config)?;
        Ok(Self {
            config: config.clone(),
            session: RwLock::new(Arc::new(Session {
                producer,
                number: 0,
            })),
        })
    }

    /// How many producer instances were replaced after a fatal error.
    #[must_use]
    pub fn sessions_replaced(&self) -> u64 {
        self.current().number
    }

    fn current(&self) -> Arc<Session> {
        self.session
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replace the producer of session `number` after its fatal error (once, however many
    /// records saw it).
    fn replace(&self, number: u64, why: &str) {
        let mut slot = self
            .session
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.number != number {
            return;
        }
        match build(&self.config) {
            Ok(producer) => {
                tracing::error!(reason = %why, "fatal producer error: a new producer replaces it; unconfirmed records are handed back");
                metrics::counter!(m::RECONNECTS, "transport" => TRANSPORT).increment(1);
                *slot = Arc::new(Session {
                    producer,
                    number: number + 1,
                });
            }
            Err(e) => tracing::error!(error = %e, "could not build a new producer"),
        }
    }

    /// Learn where `topics` live before the first record goes to them (a topic unknown to the
    /// producer costs its first record a metadata round trip or more).
    pub async fn prime(&self, topics: &[String]) {
        let session = self.current();
        let topics = topics.to_vec();
        let _ = tokio::task::spawn_blocking(move || {
            for t in &topics {
                if let Err(e) = session
                    .producer
                    .client()
                    .fetch_metadata(Some(t), Duration::from_secs(5))
                {
                    tracing::debug!(topic = %t, error = %e, "no metadata for the topic yet");
                }
            }
        })
        .await;
    }

    /// The topic and key of an outgoing message: a topic route to its topic, a consumer route
    /// (a redrive) to that consumer's redrive topic only; the aggregate key as Kafka key.
    #[must_use]
    pub fn address(&self, message: &OutgoingMessage) -> String {
        match &message.route {
            Route::Topic(t) => topic_of(&self.config.prefix, t),
            Route::Consumer(c) => ConsumerTopics::new(&self.config.prefix, c).redrive,
        }
    }

    /// Publish one record and wait for its delivery report.
    pub async fn send(&self, item: Outbound<'_>) -> Result<()> {
        self.send_batch(&[item])
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Io, "no result")))
    }

    /// Publish many: enqueued in order, all in flight at once; one result per record, in
    /// order, each from its own delivery report.
    pub async fn send_batch(&self, items: &[Outbound<'_>]) -> Vec<Result<()>> {
        let session = self.current();
        let started = Instant::now();
        let mut pending = Vec::with_capacity(items.len());
        for it in items {
            if let Err(e) = crate::naming::check_topic(it.topic) {
                pending.push(Err(e));
                continue;
            }
            let headers = to_record(it.id, it.headers);
            let mut record: FutureRecord<'_, str, [u8]> =
                FutureRecord::to(it.topic).payload(it.body).headers(headers);
            if let Some(k) = it.key {
                record = record.key(k);
            }
            // Enqueue in order: a full local queue is waited out here, never skipped, so a
            // later record of the same key cannot overtake this one.
            let queued_since = Instant::now();
            loop {
                match session.producer.send_result(record) {
                    Ok(f) => {
                        pending.push(Ok(f));
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                        if queued_since.elapsed() < Duration::from_secs(30) =>
                    {
                        record = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((e, _)) => {
                        pending.push(Err(kafka(
                            format!("enqueuing {} to {}", it.id, it.topic),
                            e,
                        )));
                        break;
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(items.len());
        for (it, p) in items.iter().zip(pending) {
            let r = match p {
                Err(e) => Err(e),
                Ok(f) => match f.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((e, _))) => {
                        Err(kafka(format!("publishing {} to {}", it.id, it.topic), e))
                    }
                    Err(_canceled) => Err(Error::new(
                        ErrorKind::Closed,
                        format!("the producer went away before reporting {}", it.id),
                    )),
                },
            };
            out.push(r);
        }
        metrics::histogram!(m::CONFIRM_SECONDS, "transport" => TRANSPORT)
            .record(started.elapsed().as_secs_f64());
        if let Some((code, why)) = session.producer.client().fatal_error() {
            // Every record not confirmed by now is handed back; nothing is reported as sent
            // unless its own report said so.
            for r in &mut out {
                if r.is_ok() {
                    continue;
                }
                *r = Err(Error::new(
                    ErrorKind::Closed,
                    format!("fatal producer error ({code:?}: {why}); the record was not confirmed"),
                ));
            }
            self.replace(session.number, &why);
        }
        out
    }

    /// Publish postroom messages (topic routes and redrives).
    /// A topic route that ends like a consumer's own topics is refused (it would land in
    /// that consumer's parking, redrive, ledger or stage topic), and so is a message over
    /// [`MAX_MESSAGE_BYTES`].
    pub async fn publish_messages(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        let refused: Vec<Option<Error>> = messages
            .iter()
            .map(|m| {
                let route = match &m.route {
                    Route::Topic(t) => crate::naming::check_route(t),
                    Route::Consumer(_) => Ok(()),
                };
                route.and_then(|()| check_size(m)).err()
            })
            .collect();
        let topics: Vec<String> = messages.iter().map(|m| self.address(m)).collect();
        let items: Vec<Outbound<'_>> = messages
            .iter()
            .zip(&topics)
            .zip(&refused)
            .filter(|(_, no)| no.is_none())
            .map(|((m, t), _)| Outbound {
                topic: t,
                key: m.headers.get(h::AGGREGATE_KEY).map(String::as_str),
                id: m.id,
                headers: &m.headers,
                body: &m.body,
            })
            .collect();
        let mut sent = self.send_batch(&items).await.into_iter();
        refused
            .into_iter()
            .map(|no| match no {
                Some(e) => Err(e),
                None => sent
                    .next()
                    .unwrap_or_else(|| Err(Error::new(ErrorKind::Io, "no result"))),
            })
            .collect()
    }
}

/// Connect a new producer at once (metadata and, with it, the idempotent producer id), so that
/// the first publish does not wait for the connection.
fn warm_up(producer: &FutureProducer) {
    let p = producer.clone();
    let _ = std::thread::Builder::new()
        .name("postroom-kafka-warm-up".into())
        .spawn(move || {
            if let Err(e) = p.client().fetch_metadata(None, Duration::from_secs(10)) {
                tracing::debug!(error = %e, "producer warm-up: no metadata yet");
            }
        });
}

fn build(config: &KafkaConfig) -> Result<FutureProducer> {
    let mut c = config.client();
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "30000")
        .set("message.max.bytes", MAX_RECORD_BYTES.to_string());
    let producer: FutureProducer = c
        .create()
        .map_err(|e| kafka("creating the Kafka producer", e))?;
    warm_up(&producer);
    Ok(producer)
}

#[async_trait::async_trait]
impl Publisher for KafkaProducer {
    async fn publish(&self, message: &OutgoingMessage) -> Result<()> {
        postroom_core::transport::publish_via_batch(self, message).await
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        self.publish_messages(messages).await
    }
}
