//! Backlog figures of a consumer from the management API: ready and unacked in the work
//! queue, messages waiting in its retry stages, and the parking depth. The API refreshes
//! queue figures every few seconds, so these lag a little.

use crate::management::ManagementApi;
use crate::naming::ConsumerNames;
use postroom_core::metrics as m;
use postroom_core::{Backlog, BacklogProbe, Result};

/// Reads backlogs of the consumers of one workload.
#[derive(Clone, Debug)]
pub struct RabbitBacklog {
    api: ManagementApi,
    prefix: String,
}

impl RabbitBacklog {
    /// A probe for consumers under `prefix`.
    #[must_use]
    pub fn new(api: ManagementApi, prefix: impl Into<String>) -> Self {
        Self {
            api,
            prefix: prefix.into(),
        }
    }

    /// Messages waiting in `consumer`'s parking queue.
    pub async fn parked(&self, consumer: &str) -> Result<u64> {
        let n = ConsumerNames::new(&self.prefix, consumer);
        Ok(self
            .api
            .queue(&n.parking_queue)
            .await?
            .and_then(|q| q.messages)
            .unwrap_or(0))
    }
}

#[async_trait::async_trait]
impl BacklogProbe for RabbitBacklog {
    async fn backlog(&self, consumer: &str) -> Result<Backlog> {
        let n = ConsumerNames::new(&self.prefix, consumer);
        let queues = self.api.queues().await?;
        let stage_prefix = format!("{}.retry.", n.work_queue);
        let mut b = Backlog::default();
        for q in &queues {
            if q.name == n.work_queue {
                b.ready = q.messages_ready.unwrap_or(0);
                b.unacked = q.messages_unacknowledged.unwrap_or(0);
            } else if q.name.starts_with(&stage_prefix) {
                b.delayed += q.messages.unwrap_or(0);
            }
        }
        // Quorum queues do not report the head message's age through the API.
        b.oldest_ready_age = None;
        let label = consumer.to_string();
        metrics::gauge!(m::READY, "consumer" => label.clone()).set(b.ready as f64);
        metrics::gauge!(m::UNACKED, "consumer" => label.clone()).set(b.unacked as f64);
        metrics::gauge!(m::DELAYED, "consumer" => label).set(b.delayed as f64);
        Ok(b)
    }
}
