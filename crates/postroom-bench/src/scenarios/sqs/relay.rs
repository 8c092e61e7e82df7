//! SQS relay: postroom's `OutboxRelay` from the PostgreSQL outbox through the SQS publisher
//! (`SendMessageBatch`, ten entries a call, every entry's result checked, the envelope's
//! fields as message attributes), beside a raw loop sending the same bodies with
//! `SendMessageBatch` (ten a call, no attributes, no database). Target ≥ 0.9.
//! The scenario itself is [`broker::relay`](crate::scenarios::broker::relay); here is SQS's
//! part.

use crate::Ctx;
use crate::error::BenchError;
use crate::report::Measurement;
use crate::resources::sqs::SqsWorkload;
use crate::scenarios::broker::Figure;
use crate::scenarios::broker::relay::SharedClientRelay;
use postroom_core::{OutgoingMessage, async_trait};
use postroom_sqs::aws_sdk_sqs::types::SendMessageBatchRequestEntry;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let figure = Figure {
        name: "relay_pg_to_sqs",
        group: "sqs",
        baseline: "raw SendMessageBatch loop (10 per call, as many senders as relays), no database",
        // A queue is purged at most once a minute: queues of its own for every round.
        fresh_per_round: true,
    };
    crate::scenarios::broker::relay::run::<SqsWorkload>(ctx, figure).await
}

/// The raw senders share one client; ten messages a call, whatever the window.
#[async_trait]
impl SharedClientRelay for SqsWorkload {
    /// Send `part` ten at a time; every entry must succeed.
    async fn send_part(&self, part: &[OutgoingMessage], _window: usize) -> Result<(), BenchError> {
        for chunk in part.chunks(10) {
            let mut req = self.client.send_message_batch().queue_url(&self.work_url);
            for (i, m) in chunk.iter().enumerate() {
                req = req.entries(
                    SendMessageBatchRequestEntry::builder()
                        .id(format!("e{i}"))
                        .message_body(String::from_utf8_lossy(&m.body))
                        .build()
                        .map_err(|e| BenchError::Config(format!("raw entry: {e}")))?,
                );
            }
            super::send_batch("SendMessageBatch", req.send(), |out| out.failed().len()).await?;
        }
        Ok(())
    }

    /// The work queue holds them all (SQS's figures lag: waited for).
    async fn all_arrived(&self, n: usize, _confirmed: Option<usize>) -> Result<(), BenchError> {
        self.expect(n as u64).await
    }
}
