//! NATS relay: postroom's `OutboxRelay` from the PostgreSQL outbox to a JetStream stream
//! through the confirming publisher (`Nats-Msg-Id` = the message id, a batch in flight, the
//! PubAcks awaited), beside a raw async-nats loop publishing the same payloads with the same
//! header and the same window and waiting for the PubAcks. Target ≥ 90 %.
//! The scenario itself is [`broker::relay`](super::broker::relay); here is NATS's part.

use super::broker::Figure;
use super::broker::relay::SharedClientRelay;
use crate::Ctx;
use crate::error::BenchError;
use crate::report::Measurement;
use crate::resources::nats::NatsWorkload;
use postroom_core::{OutgoingMessage, async_trait};

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let figure = Figure {
        name: "relay_pg_to_nats",
        group: "nats-relay",
        baseline: "raw async-nats loop: publish with Nats-Msg-Id, wait for the PubAcks, same window, no database",
        fresh_per_round: false,
    };
    Ok(vec![
        super::broker::relay::run::<NatsWorkload>(ctx, figure).await?,
    ])
}

/// The raw publishers share one raw connection.
#[async_trait]
impl SharedClientRelay for NatsWorkload {
    async fn send_part(&self, part: &[OutgoingMessage], window: usize) -> Result<(), BenchError> {
        self.raw_publish(part, window).await
    }

    /// The work stream held them all (purged for the next round).
    async fn all_arrived(&self, n: usize, _confirmed: Option<usize>) -> Result<(), BenchError> {
        let got = self.purge().await?;
        if got == n as u64 {
            Ok(())
        } else {
            Err(BenchError::Stalled(format!(
                "{got} of {n} messages reached the stream"
            )))
        }
    }
}
