//! Consumer lag: per partition, the log end offset minus the group's committed offset (or
//! the log start, when the group committed nothing), summed over topics.

use crate::config::KafkaConfig;
use crate::error::kafka;
use postroom_core::Result;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// Records of `topics` not yet committed by `group` (a blocking call).
pub fn lag(config: &KafkaConfig, group: &str, topics: &[String]) -> Result<u64> {
    let consumer: BaseConsumer = config
        .client()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| kafka("creating a lag probe", e))?;
    let mut total = 0u64;
    for topic in topics {
        let md = consumer
            .fetch_metadata(Some(topic), WAIT)
            .map_err(|e| kafka(format!("reading metadata of {topic}"), e))?;
        let Some(t) = md.topics().first() else {
            continue;
        };
        let mut tpl = TopicPartitionList::new();
        for p in t.partitions() {
            tpl.add_partition(topic, p.id());
        }
        let committed = consumer
            .committed_offsets(tpl, WAIT)
            .map_err(|e| kafka(format!("reading committed offsets of {group}"), e))?;
        for e in committed.elements() {
            let (low, high) = consumer
                .fetch_watermarks(topic, e.partition(), WAIT)
                .map_err(|e| kafka(format!("reading offsets of {topic}"), e))?;
            let from = match e.offset() {
                Offset::Offset(o) => o.max(low),
                _ => low,
            };
            total += u64::try_from(high - from).unwrap_or(0);
        }
    }
    Ok(total)
}
