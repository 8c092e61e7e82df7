//! The queues of a workload, from its [`TopologyConfig`]: for each consumer a DLQ, then its
//! work queue whose `RedrivePolicy` sends a message to that DLQ after `maxReceiveCount`
//! receives (the crash-loop bound), with the visibility timeout, retention (the DLQ's longer)
//! and maximum size asked for; FIFO queues with content-based deduplication off (postroom
//! gives the message id as the deduplication id).
//!
//! [`Topology::plan`] compares the configuration with the queues as they are and lists the
//! [`Change`]s, changing nothing (a dry run); [`Topology::apply`] makes them and returns what
//! it changed. Applying twice changes nothing the second time.

pub mod change;
mod purge;

pub use change::Change;

use crate::config::TopologyConfig;
use crate::error::{code_of, sdk};
use crate::naming::QueueNames;
use crate::routes::ConsumerQueues;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;
use change::same_redrive_policy;
use postroom_core::{ErrorKind, Result};
use std::collections::{BTreeMap, HashMap};

/// A workload's queues on one SQS endpoint.
#[derive(Clone, Debug)]
pub struct Topology {
    client: Client,
    config: TopologyConfig,
}

/// One queue as the configuration wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DesiredQueue {
    name: String,
    attributes: BTreeMap<String, String>,
}

fn secs(d: std::time::Duration) -> String {
    d.as_secs().max(1).to_string()
}

impl Topology {
    /// The topology of `config` on `client`'s endpoint.
    pub fn new(client: Client, config: TopologyConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { client, config })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &TopologyConfig {
        &self.config
    }

    /// The client.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn common(&self, retention: std::time::Duration) -> BTreeMap<String, String> {
        let c = &self.config;
        let mut a = BTreeMap::new();
        a.insert("VisibilityTimeout".into(), secs(c.visibility_timeout));
        a.insert("MessageRetentionPeriod".into(), secs(retention));
        a.insert("MaximumMessageSize".into(), c.max_message_bytes.to_string());
        if c.fifo {
            a.insert("FifoQueue".into(), "true".into());
            a.insert("ContentBasedDeduplication".into(), "false".into());
        }
        a
    }

    fn desired_dlq(&self, names: &QueueNames) -> DesiredQueue {
        DesiredQueue {
            name: names.dlq.clone(),
            attributes: self.common(self.config.dlq_retention),
        }
    }

    fn desired_work(&self, names: &QueueNames, dlq_arn: &str) -> DesiredQueue {
        let mut attributes = self.common(self.config.retention);
        attributes.insert(
            "RedrivePolicy".into(),
            serde_json::json!({
                "deadLetterTargetArn": dlq_arn,
                "maxReceiveCount": self.config.max_receive_count,
            })
            .to_string(),
        );
        DesiredQueue {
            name: names.work.clone(),
            attributes,
        }
    }

    /// What `apply` would change, changing nothing.
    pub async fn plan(&self) -> Result<Vec<Change>> {
        let mut changes = Vec::new();
        for c in &self.config.consumers {
            let names = self.config.names(&c.name)?;
            let dlq = self.desired_dlq(&names);
            let dlq_url = self.queue_url(&dlq.name).await?;
            let dlq_arn = match &dlq_url {
                Some(url) => self.arn(url).await?,
                None => format!("(the ARN of {})", dlq.name),
            };
            changes.extend(self.diff(&dlq, dlq_url.as_deref()).await?);
            let work = self.desired_work(&names, &dlq_arn);
            let work_url = self.queue_url(&work.name).await?;
            changes.extend(self.diff(&work, work_url.as_deref()).await?);
        }
        Ok(changes)
    }

    /// Make the queues what the configuration says; returns the changes made.
    pub async fn apply(&self) -> Result<Vec<Change>> {
        let mut changes = Vec::new();
        for c in &self.config.consumers {
            let (_, made) = self.apply_consumer(&c.name, &c.bindings).await?;
            changes.extend(made);
        }
        Ok(changes)
    }

    /// Make one consumer's DLQ and work queue what the configuration says (the consumer need
    /// not be listed in it); its queues, with `patterns` as its bindings, and the changes made.
    pub async fn apply_consumer(
        &self,
        consumer: &str,
        patterns: &[String],
    ) -> Result<(ConsumerQueues, Vec<Change>)> {
        let names = self.config.names(consumer)?;
        let mut made = Vec::new();
        let dlq = self.desired_dlq(&names);
        let dlq_url = self.ensure(&dlq, &mut made).await?;
        let dlq_arn = self.arn(&dlq_url).await?;
        let work = self.desired_work(&names, &dlq_arn);
        let work_url = self.ensure(&work, &mut made).await?;
        for change in &made {
            tracing::info!(%change, "SQS topology changed");
        }
        Ok((
            ConsumerQueues {
                names,
                work_url,
                dlq_url,
                patterns: patterns.to_vec(),
            },
            made,
        ))
    }

    /// The URLs of a consumer's existing queues; `NotFound` when they do not exist.
    pub async fn existing_consumer(
        &self,
        consumer: &str,
        patterns: &[String],
    ) -> Result<ConsumerQueues> {
        let names = self.config.names(consumer)?;
        let missing = |q: &str| {
            postroom_core::Error::new(
                ErrorKind::NotFound,
                format!("the SQS queue {q} does not exist: apply the topology first"),
            )
        };
        let work_url = self
            .queue_url(&names.work)
            .await?
            .ok_or_else(|| missing(&names.work))?;
        let dlq_url = self
            .queue_url(&names.dlq)
            .await?
            .ok_or_else(|| missing(&names.dlq))?;
        Ok(ConsumerQueues {
            names,
            work_url,
            dlq_url,
            patterns: patterns.to_vec(),
        })
    }

    /// The URL of queue `name`, `None` when it does not exist.
    pub async fn queue_url(&self, name: &str) -> Result<Option<String>> {
        match self.client.get_queue_url().queue_name(name).send().await {
            Ok(out) => Ok(out.queue_url().map(str::to_string)),
            Err(e) => {
                let err = sdk(format!("looking up queue {name}"), e);
                if err.kind() == ErrorKind::NotFound {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    async fn attributes(&self, url: &str) -> Result<HashMap<String, String>> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .map_err(|e| sdk(format!("reading the attributes of {url}"), e))?;
        Ok(out
            .attributes()
            .map(|a| {
                a.iter()
                    .map(|(k, v)| (k.as_str().to_string(), v.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn arn(&self, url: &str) -> Result<String> {
        self.attributes(url)
            .await?
            .remove("QueueArn")
            .ok_or_else(|| {
                postroom_core::Error::new(ErrorKind::InvalidData, format!("no QueueArn for {url}"))
            })
    }

    async fn diff(&self, want: &DesiredQueue, url: Option<&str>) -> Result<Vec<Change>> {
        let Some(url) = url else {
            return Ok(vec![Change::CreateQueue {
                name: want.name.clone(),
                attributes: want.attributes.clone(),
            }]);
        };
        let now = self.attributes(url).await?;
        let mut out = Vec::new();
        for (k, v) in &want.attributes {
            // Fixed at creation (and implied by the name).
            if k == "FifoQueue" {
                continue;
            }
            let have = now.get(k).cloned().unwrap_or_default();
            let same = if k == "RedrivePolicy" {
                same_redrive_policy(&have, v)
            } else {
                &have == v
            };
            if !same {
                out.push(Change::SetAttribute {
                    queue: want.name.clone(),
                    attribute: k.clone(),
                    from: have,
                    to: v.clone(),
                });
            }
        }
        Ok(out)
    }

    /// Create the queue or correct its attributes; its URL.
    async fn ensure(&self, want: &DesiredQueue, made: &mut Vec<Change>) -> Result<String> {
        let url = self.queue_url(&want.name).await?;
        let changes = self.diff(want, url.as_deref()).await?;
        let url = match url {
            None => {
                let attrs: HashMap<QueueAttributeName, String> = want
                    .attributes
                    .iter()
                    .map(|(k, v)| (QueueAttributeName::from(k.as_str()), v.clone()))
                    .collect();
                let out = self
                    .client
                    .create_queue()
                    .queue_name(&want.name)
                    .set_attributes(Some(attrs))
                    .send()
                    .await;
                match out {
                    Ok(o) => o.queue_url().map(str::to_string).unwrap_or_default(),
                    // Another process created it first with other attributes: correct them.
                    Err(e)
                        if code_of(&e).is_some_and(|(c, _)| {
                            c.ends_with("QueueAlreadyExists") || c == "QueueNameExists"
                        }) =>
                    {
                        return Box::pin(self.ensure(want, made)).await;
                    }
                    Err(e) => return Err(sdk(format!("creating queue {}", want.name), e)),
                }
            }
            Some(url) => {
                let set: HashMap<QueueAttributeName, String> = changes
                    .iter()
                    .filter_map(|c| match c {
                        Change::SetAttribute { attribute, to, .. } => {
                            Some((QueueAttributeName::from(attribute.as_str()), to.clone()))
                        }
                        Change::CreateQueue { .. } => None,
                    })
                    .collect();
                if !set.is_empty() {
                    self.client
                        .set_queue_attributes()
                        .queue_url(&url)
                        .set_attributes(Some(set))
                        .send()
                        .await
                        .map_err(|e| sdk(format!("setting attributes of {}", want.name), e))?;
                }
                url
            }
        };
        made.extend(changes);
        Ok(url)
    }
}

postroom_core::broker_topology!(Topology, Change);
