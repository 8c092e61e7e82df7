//! One scenario's queues on the SQS endpoint (`POSTROOM_TEST_SQS`, default the local moto
//! server; region and credentials from the AWS environment): the bench consumer's work queue
//! and DLQ under a random prefix, bound to `bench.#`, deleted at the end.

use super::rabbit::{BINDING, CONSUMER};
use super::rand_suffix;
use crate::error::{BenchError, Context};
use postroom_sqs::aws_sdk_sqs::Client;
use postroom_sqs::aws_sdk_sqs::types::QueueAttributeName;
use postroom_sqs::error::sdk;
use postroom_sqs::{SqsTransport, Topology, TopologyConfig};
use std::sync::Arc;
use std::time::Duration;

/// The endpoint.
#[must_use]
pub fn endpoint() -> String {
    std::env::var("POSTROOM_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:5000".into())
}

/// One scenario's queues.
pub struct SqsWorkload {
    /// The client (raw baselines use it directly).
    pub client: Client,
    /// postroom's transport on the queues.
    pub transport: Arc<SqsTransport>,
    /// The work queue's URL.
    pub work_url: String,
    topology: Topology,
}

/// The bench queues' visibility timeout. A receive whose answer is lost on the way (the
/// client gives up on an attempt after [`postroom_sqs::client::ATTEMPT_TIMEOUT`], 30 s, and
/// asks again) leaves its messages hidden this long: with SQS's default of 30 s they could
/// come back only after a round's deadline (61 s for 200 messages), and the round would stall
/// a few short. 10 s lets the other workers take them well before; no bench handler holds a
/// message that long, and postroom's subscriber extends the visibility of what it holds.
const VISIBILITY: Duration = Duration::from_secs(10);

impl SqsWorkload {
    /// Create the queues of `scenario`, visibility timeout 10 s (`VISIBILITY`).
    pub async fn create(scenario: &str) -> Result<Self, BenchError> {
        let region = std::env::var("AWS_REGION")
            .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|_| "us-east-1".into());
        let client = postroom_sqs::client::connect_to(Some(&endpoint()), Some(&region))
            .await
            .ctx("SQS client")?;
        client
            .list_queues()
            .send()
            .await
            .map_err(|e| BenchError::Unavailable {
                server: "SQS",
                url: endpoint(),
                message: sdk("ListQueues", e).to_string(),
            })?;
        let config = TopologyConfig {
            prefix: format!("prb-{}-{scenario}", rand_suffix()),
            visibility_timeout: VISIBILITY,
            ..TopologyConfig::default()
        }
        .with_consumer(CONSUMER, &[BINDING]);
        let topology = Topology::new(client.clone(), config.clone()).ctx("SQS topology")?;
        topology.apply().await.ctx("creating the SQS queues")?;
        let transport = SqsTransport::connect(client.clone(), config)
            .await
            .ctx("SQS transport")?;
        let work_url = transport
            .queues(CONSUMER)
            .map(|q| q.work_url.clone())
            .ok_or_else(|| BenchError::Config("no SQS work queue".into()))?;
        Ok(Self {
            client,
            transport: Arc::new(transport),
            work_url,
            topology,
        })
    }

    /// Messages in the work queue, visible or not (approximate: SQS's figure).
    pub async fn count(&self) -> Result<u64, BenchError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.work_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| sdk("reading the work queue's size", e))
            .ctx("SQS")?;
        Ok(out
            .attributes()
            .map(|a| {
                a.values()
                    .filter_map(|v| v.parse::<u64>().ok())
                    .sum::<u64>()
            })
            .unwrap_or(0))
    }

    /// Wait until the work queue holds `n` messages (SQS's figures lag a little); an error
    /// when it does not within 30 s. (A queue is purged at most once a minute: each round
    /// gets queues of its own instead.)
    pub async fn expect(&self, n: u64) -> Result<(), BenchError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut got = self.count().await?;
        while got != n && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            got = self.count().await?;
        }
        if got == n {
            Ok(())
        } else {
            Err(BenchError::Stalled(format!(
                "{got} of {n} messages reached the SQS queue"
            )))
        }
    }

    /// Delete the queues.
    pub async fn delete(&self) -> Result<(), BenchError> {
        let cfg = self.topology.config();
        let names = cfg.names(CONSUMER).ctx("names")?;
        for name in [&names.work, &names.dlq] {
            if let Some(url) = self.topology.queue_url(name).await.ctx("lookup")? {
                self.client
                    .delete_queue()
                    .queue_url(url)
                    .send()
                    .await
                    .map_err(|e| sdk(format!("deleting {name}"), e))
                    .ctx("SQS")?;
            }
        }
        Ok(())
    }
}

#[postroom_core::async_trait]
impl super::BrokerWorkload for SqsWorkload {
    async fn create(_ctx: &crate::Ctx, scenario: &str) -> Result<Self, BenchError> {
        SqsWorkload::create(scenario).await
    }

    fn transport(&self) -> &dyn postroom_core::Transport {
        self.transport.as_ref()
    }

    async fn delete(self) -> Result<(), BenchError> {
        SqsWorkload::delete(&self).await
    }

    fn messages(args: &crate::BenchArgs) -> usize {
        args.sqs_messages()
    }
}
