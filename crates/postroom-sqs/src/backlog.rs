//! Backlog figures from the queue's attributes: `ApproximateNumberOfMessages` (ready),
//! `…NotVisible` (received and not yet deleted, including messages hidden for a retry) and
//! `…Delayed`. SQS gives the age of the oldest message only through CloudWatch
//! (`ApproximateAgeOfOldestMessage`), not through its API: it is left unknown here.

use crate::error::sdk;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;
use postroom_core::{Backlog, Result};

/// The backlog of the queue at `url`.
pub async fn of_queue(client: &Client, url: &str) -> Result<Backlog> {
    let out = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .map_err(|e| sdk(format!("reading the backlog of {url}"), e))?;
    let get = |name: QueueAttributeName| -> u64 {
        out.attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Backlog {
        ready: get(QueueAttributeName::ApproximateNumberOfMessages),
        unacked: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        oldest_ready_age: None,
    })
}
