//! What a configuration asks JetStream for: the work stream, one parking stream per consumer
//! (its parked copies and the advisories of its durables), the consumer's durables on the work
//! stream, and the ingest durable on its parking stream.

use super::wire::{ConsumerConfig, StreamConfig};
use crate::config::{NatsConfig, Storage};
use crate::naming::{self, Lane};
use std::time::Duration;

/// One durable and the stream it reads.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsumerSpec {
    /// Stream.
    pub stream: String,
    /// Configuration.
    pub config: ConsumerConfig,
}

/// Everything a configuration asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredTopology {
    /// Streams.
    pub streams: Vec<StreamConfig>,
    /// Durables.
    pub consumers: Vec<ConsumerSpec>,
}

fn storage(s: Storage) -> String {
    match s {
        Storage::File => "file".into(),
        Storage::Memory => "memory".into(),
    }
}

fn stream(
    name: String,
    subjects: Vec<String>,
    max_age: Duration,
    cfg: &NatsConfig,
) -> StreamConfig {
    StreamConfig {
        name,
        subjects,
        retention: "limits".into(),
        storage: storage(cfg.storage),
        num_replicas: cfg.replicas,
        max_age,
        duplicate_window: cfg.duplicate_window,
        max_msgs: -1,
        max_bytes: -1,
        max_consumers: -1,
        discard: "old".into(),
    }
}

/// The durable of one lane.
#[must_use]
pub fn lane_consumer(cfg: &NatsConfig, lane: &Lane) -> ConsumerConfig {
    ConsumerConfig {
        durable_name: lane.durable.clone(),
        ack_policy: "explicit".into(),
        deliver_policy: "all".into(),
        replay_policy: "instant".into(),
        ack_wait: cfg.ack_wait,
        max_deliver: i64::from(cfg.max_deliver),
        filter_subject: lane.filter.clone(),
        // A partition hands out one copy at a time: its order is the order of handling.
        max_ack_pending: if lane.partition.is_some() {
            1
        } else {
            i64::from(cfg.max_ack_pending)
        },
        backoff: cfg.backoff.clone(),
    }
}

/// The ingest durable of a parking stream: every copy, redelivered until stored.
#[must_use]
pub fn ingest_consumer() -> ConsumerConfig {
    ConsumerConfig {
        durable_name: naming::INGEST_DURABLE.into(),
        ack_policy: "explicit".into(),
        deliver_policy: "all".into(),
        replay_policy: "instant".into(),
        ack_wait: Duration::from_secs(30),
        max_deliver: -1,
        filter_subject: String::new(),
        max_ack_pending: 1000,
        backoff: Vec::new(),
    }
}

impl DesiredTopology {
    /// What `cfg` asks for.
    #[must_use]
    pub fn of(cfg: &NatsConfig) -> Self {
        let p = &cfg.prefix;
        let work = naming::work_stream(p);
        let mut streams = vec![stream(
            work.clone(),
            vec![format!("{p}.>"), format!("_pr.{p}.direct.>")],
            cfg.max_age,
            cfg,
        )];
        let mut consumers = Vec::new();
        for c in &cfg.consumers {
            let lanes = naming::lanes(cfg, c);
            let mut subjects = vec![naming::parking_subject(p, &c.name)];
            for lane in &lanes {
                subjects.push(naming::max_deliveries_advisory(&work, &lane.durable));
                subjects.push(naming::terminated_advisory(&work, &lane.durable));
            }
            let parking = naming::parking_stream(p, &c.name);
            streams.push(stream(parking.clone(), subjects, cfg.parking_max_age, cfg));
            consumers.push(ConsumerSpec {
                stream: parking,
                config: ingest_consumer(),
            });
            for lane in &lanes {
                consumers.push(ConsumerSpec {
                    stream: work.clone(),
                    config: lane_consumer(cfg, lane),
                });
            }
        }
        Self { streams, consumers }
    }
}
