//! The confirming publisher: a publish succeeds when SQS accepted the message into every queue
//! its route reaches (a topic fans out to each matching consumer's queue). Batches go per
//! queue through `SendMessageBatch`; a message refused by any of its queues is an error,
//! never counted as sent (the relay sends it again with the same id; the inbox, and on FIFO
//! queues SQS's deduplication by message id, absorb the copies that did arrive).
//!
//! On FIFO queues the message group is the aggregate key (`x-aggregate-key`; the message id
//! when there is none) and the deduplication id is the message id — for a redriven copy the
//! id plus its redrive count, or SQS would drop it as a duplicate within five minutes.

use crate::codec::encode;
use crate::routes::Routes;
use crate::send::{Entry, copy_error, group_id, send_to_queue};
use crate::topology::Topology;
use aws_sdk_sqs::Client;
use futures::future::join_all;
use postroom_core::message::headers as h;
use postroom_core::metrics as m;
use postroom_core::{Error, ErrorKind, OutgoingMessage, Publisher, Result, Route};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The transport label in metrics.
pub const TRANSPORT: &str = "sqs";

/// Publishes to the consumers' work queues.
#[derive(Clone, Debug)]
pub struct SqsPublisher {
    client: Client,
    routes: Arc<Routes>,
    topology: Topology,
}

impl SqsPublisher {
    /// A publisher routing through `routes`; a consumer route to a consumer the table does
    /// not know yet (one bound by another process) is looked up among `topology`'s queues.
    #[must_use]
    pub fn new(routes: Arc<Routes>, topology: Topology) -> Self {
        Self {
            client: topology.client().clone(),
            routes,
            topology,
        }
    }

    /// Look up the queues of consumers named by consumer routes and not yet known.
    async fn learn_consumers(&self, messages: &[OutgoingMessage]) {
        for m in messages {
            if let Route::Consumer(name) = &m.route
                && self.routes.get(name).is_none()
                && let Ok(queues) = self.topology.existing_consumer(name, &[]).await
            {
                self.routes.insert(queues);
            }
        }
    }

    /// The entry of `m` for one queue, or why it cannot be sent.
    fn entry(&self, m: &OutgoingMessage) -> Result<Entry> {
        let route = match &m.route {
            Route::Topic(t) => t.clone(),
            Route::Consumer(_) => m
                .headers
                .get(h::ORIGINAL_ROUTE)
                .cloned()
                .unwrap_or_default(),
        };
        let encoded = encode(m.id, &route, &m.headers, &m.body)?;
        let max = self.topology.config().max_message_bytes;
        if encoded.size > max {
            return Err(Error::new(
                ErrorKind::InvalidData,
                format!(
                    "message {} is {} bytes with its attributes; the queues take at most {}",
                    m.id, encoded.size, max
                ),
            ));
        }
        let (group, dedup) = if self.topology.config().fifo {
            let key = m
                .headers
                .get(h::AGGREGATE_KEY)
                .cloned()
                .unwrap_or_else(|| m.id.to_string());
            let dedup = match (&m.route, m.headers.get(h::REDRIVE_COUNT)) {
                (Route::Consumer(_), Some(n)) => format!("{}.redrive.{n}", m.id),
                _ => m.id.to_string(),
            };
            (Some(group_id(&key)), Some(dedup))
        } else {
            (None, None)
        };
        Ok(Entry {
            encoded,
            group,
            dedup,
        })
    }
}

#[async_trait::async_trait]
impl Publisher for SqsPublisher {
    async fn publish(&self, message: &OutgoingMessage) -> Result<()> {
        postroom_core::transport::publish_via_batch(self, message).await
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        self.learn_consumers(messages).await;
        let mut results: Vec<Result<()>> = messages.iter().map(|_| Ok(())).collect();
        // Queue URL → (message index, entry), in message order.
        let mut per_queue: BTreeMap<String, Vec<(usize, Entry)>> = BTreeMap::new();
        for (i, msg) in messages.iter().enumerate() {
            let planned = self
                .routes
                .targets(&msg.route)
                .and_then(|targets| Ok((targets, self.entry(msg)?)));
            match planned {
                Ok((targets, entry)) => {
                    for t in targets {
                        per_queue
                            .entry(t.work_url.clone())
                            .or_default()
                            .push((i, entry.clone()));
                    }
                }
                Err(e) => {
                    if e.kind() == ErrorKind::Unroutable {
                        metrics::counter!(m::UNROUTABLE, "transport" => TRANSPORT).increment(1);
                    }
                    results[i] = Err(e);
                }
            }
        }
        let started = Instant::now();
        let sends = per_queue.iter().map(|(url, items)| async move {
            let entries: Vec<Entry> = items.iter().map(|(_, e)| e.clone()).collect();
            let r = send_to_queue(&self.client, url, &entries).await;
            items.iter().map(|(i, _)| *i).zip(r).collect::<Vec<_>>()
        });
        for (i, r) in join_all(sends).await.into_iter().flatten() {
            if let (Err(e), Ok(())) = (&r, &results[i]) {
                results[i] = Err(copy_error(e));
            }
        }
        if !per_queue.is_empty() {
            metrics::histogram!(m::CONFIRM_SECONDS, "transport" => TRANSPORT)
                .record(started.elapsed().as_secs_f64());
        }
        results
    }
}
