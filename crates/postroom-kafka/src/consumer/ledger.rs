//! The delivery ledger of one consumer group: how many times each uncommitted record was
//! handed to a consumer loop, kept in a compacted topic `<group>.deliveries` (one partition,
//! key `<topic>/<partition>`, value the [`Marks`] of that partition). Kafka does not count
//! deliveries; this is what bounds a crash loop (a record whose handling kills the process
//! before its offset is committed).
//!
//! Why a topic: the count must outlive the process and reach whichever member owns the
//! partition next, and it must be written before the handler runs. The group's committed
//! offset metadata would be the natural place, but not every Kafka-compatible broker keeps it
//! (tansu returns it empty); a compacted topic on the same cluster has the same durability as
//! the offsets it describes and needs nothing else. The latest value per key is all that
//! matters, so compaction bounds the topic. Each member reads the topic once from the start and
//! then only what is new, when a partition is assigned to it.

use super::marks::Marks;
use super::record::Tp;
use crate::config::KafkaConfig;
use crate::error::kafka;
use crate::producer::{KafkaProducer, Outbound};
use postroom_core::{Error, ErrorKind, Headers, MessageId, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long reading the ledger up to its end may take.
const CATCH_UP: Duration = Duration::from_secs(10);

/// The ledger reader and writer of one subscriber (used on its poll thread only).
pub(crate) struct Ledger {
    topic: String,
    producer: Arc<KafkaProducer>,
    runtime: tokio::runtime::Handle,
    reader: BaseConsumer,
    /// Latest value per key, as far as read.
    latest: HashMap<String, Marks>,
    /// Next offset of the ledger partition to read.
    position: i64,
}

fn key_of(tp: &Tp) -> String {
    format!("{}/{}", tp.0, tp.1)
}

impl Ledger {
    /// The ledger in `topic` (which must exist), written through `producer`.
    pub(crate) fn open(
        config: &KafkaConfig,
        topic: String,
        producer: Arc<KafkaProducer>,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::Config,
                "a Kafka subscriber must be started inside a tokio runtime",
            )
        })?;
        let mut client = config.client();
        client
            .set("group.id", format!("{topic}.reader"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "20");
        let reader: BaseConsumer = client
            .create()
            .map_err(|e| kafka("creating the delivery ledger reader", e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Beginning)
            .map_err(|e| kafka("assigning the delivery ledger", e))?;
        reader
            .assign(&tpl)
            .map_err(|e| kafka("assigning the delivery ledger", e))?;
        Ok(Self {
            topic,
            producer,
            runtime,
            reader,
            latest: HashMap::new(),
            position: 0,
        })
    }

    /// Read the ledger up to its current end.
    fn catch_up(&mut self) -> Result<()> {
        let (_, high) = self
            .reader
            .fetch_watermarks(&self.topic, 0, Duration::from_secs(5))
            .map_err(|e| kafka(format!("reading the end of {}", self.topic), e))?;
        let deadline = Instant::now() + CATCH_UP;
        while self.position < high {
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "reading the delivery ledger {} took longer than {CATCH_UP:?}",
                        self.topic
                    ),
                ));
            }
            match self.reader.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    self.position = m.offset() + 1;
                    let Some(key) = m.key().and_then(|k| std::str::from_utf8(k).ok()) else {
                        continue;
                    };
                    let marks = m
                        .payload()
                        .and_then(|p| std::str::from_utf8(p).ok())
                        .and_then(Marks::parse)
                        .unwrap_or_default();
                    self.latest.insert(key.to_string(), marks);
                }
                Some(Err(e)) => return Err(kafka(format!("reading {}", self.topic), e)),
                None => {}
            }
        }
        Ok(())
    }

    /// The counts of `tp` as the ledger has them now.
    pub(crate) fn load(&mut self, tp: &Tp) -> Result<Marks> {
        self.catch_up()?;
        Ok(self.latest.get(&key_of(tp)).cloned().unwrap_or_default())
    }

    /// Write the counts of these partitions and wait until the broker has them all.
    pub(crate) fn write(&mut self, items: &[(Tp, Marks)]) -> Result<()> {
        let keys: Vec<String> = items.iter().map(|(tp, _)| key_of(tp)).collect();
        let values: Vec<String> = items.iter().map(|(_, m)| m.to_string()).collect();
        let headers = Headers::new();
        let outbound: Vec<Outbound<'_>> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| Outbound {
                topic: &self.topic,
                key: Some(k),
                id: MessageId::derived_from(format!("{k}={v}").as_bytes()),
                headers: &headers,
                body: v.as_bytes(),
            })
            .collect();
        let results = self.runtime.block_on(self.producer.send_batch(&outbound));
        results.into_iter().collect::<Result<Vec<()>>>()?;
        for ((_, marks), key) in items.iter().zip(keys) {
            self.latest.insert(key, marks.clone());
        }
        Ok(())
    }
}
