//! Emptying a workload's queues (a run that starts afresh: nothing of an earlier, interrupted
//! run is delivered into it). `PurgeQueue` drops every message, in flight ones too. On AWS a
//! purge takes up to 60 s to complete and one queue takes one purge a minute; messages sent
//! while it runs may be dropped with the rest, so start producing only after that minute.
//! Local endpoints purge at once.

use super::Topology;
use crate::error::sdk;
use postroom_core::Result;

impl Topology {
    /// Purge the work queue and the DLQ of every consumer the configuration lists (those
    /// that exist); returns how many queues were purged.
    pub async fn purge(&self) -> Result<usize> {
        let mut purged = 0;
        for c in &self.config().consumers {
            let names = self.config().names(&c.name)?;
            for name in [&names.work, &names.dlq] {
                let Some(url) = self.queue_url(name).await? else {
                    continue;
                };
                self.client()
                    .purge_queue()
                    .queue_url(&url)
                    .send()
                    .await
                    .map_err(|e| sdk(format!("purging queue {name}"), e))?;
                purged += 1;
            }
        }
        Ok(purged)
    }
}
