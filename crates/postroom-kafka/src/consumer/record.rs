//! A record as fetched, owned, and what the consumer knows of where it came from.

use crate::headers::from_record;
use postroom_core::{Headers, MessageId};
use rdkafka::message::{BorrowedMessage, Message};
use std::time::SystemTime;

/// A topic and partition.
pub(crate) type Tp = (String, i32);

/// One fetched record, owned.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<String>,
    pub(crate) id: Option<MessageId>,
    pub(crate) headers: Headers,
    pub(crate) body: Vec<u8>,
    /// How many times it was handed to a consumer loop, this time included, by the delivery
    /// ledger (0: not counted).
    pub(crate) deliveries: u32,
}

impl Record {
    pub(crate) fn from_message(m: &BorrowedMessage<'_>) -> Self {
        let (id, headers) = from_record(m.headers());
        Self {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m
                .key()
                .and_then(|k| std::str::from_utf8(k).ok())
                .map(str::to_string),
            id,
            headers,
            body: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
            deliveries: 0,
        }
    }

    /// Handed out before without being committed: the consumer died or lost the partition
    /// while it was out. Such a record is handed out alone, so that a crash counts against it
    /// only.
    pub(crate) fn suspect(&self) -> bool {
        self.deliveries > 1
    }

    pub(crate) fn tp(&self) -> Tp {
        (self.topic.clone(), self.partition)
    }

    /// The ordering key: the Kafka key, else the aggregate key header.
    pub(crate) fn ordering_key(&self) -> Option<String> {
        self.key.clone().or_else(|| {
            self.headers
                .get(postroom_core::message::headers::AGGREGATE_KEY)
                .cloned()
        })
    }
}

/// A record held back in its partition until `not_before` (a retry copy not yet due, a
/// blocking-mode retry), with the records fetched behind it.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub(crate) record: Record,
    pub(crate) not_before: Option<SystemTime>,
}

/// A record handed from the poll thread to the subscriber, with the generation of its
/// partition's ownership when it was fetched.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub(crate) record: Record,
    pub(crate) generation: u64,
}
