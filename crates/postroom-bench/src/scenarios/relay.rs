//! Scenario 1, relay: postroom's `OutboxRelay` from the PostgreSQL outbox to a RabbitMQ quorum
//! queue through the confirming publisher, beside a raw lapin loop publishing the same
//! payloads with pipelined confirms (the same window as the relay's batch). Target ≥ 90 %.
//! The scenario itself is [`broker::relay`](super::broker::relay); here is RabbitMQ's part.
//! `relay-no-aggregate` runs the same pair with messages built without an aggregate.

use super::broker::Figure;
use super::broker::relay::{RawRelay, RelayLoad};
use crate::Ctx;
use crate::error::BenchError;
use crate::report::Measurement;
use crate::resources::rabbit::Workload;
use lapin::Channel;
use postroom_core::{OutgoingMessage, async_trait};

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let figure = Figure {
        name: "relay_pg_to_rabbitmq",
        group: "relay",
        baseline: "raw lapin loop, pipelined confirms, no database",
        fresh_per_round: false,
    };
    Ok(vec![
        super::broker::relay::run::<Workload>(ctx, figure).await?,
    ])
}

/// The same pair with messages built without an aggregate (each its own key): one figure to
/// set beside [`run`]'s, which spreads them over aggregates.
pub async fn run_unordered(ctx: &Ctx) -> Result<Vec<Measurement>, BenchError> {
    let figure = Figure {
        name: "relay_pg_to_rabbitmq_no_aggregate",
        group: "relay-no-aggregate",
        baseline: "raw lapin loop, pipelined confirms, no database",
        fresh_per_round: false,
    };
    Ok(vec![
        super::broker::relay::run_unordered::<Workload>(ctx, figure).await?,
    ])
}

/// One raw confirm-mode channel per relay.
#[async_trait]
impl RawRelay for Workload {
    type Sender = Channel;

    async fn raw_senders(&self, load: &RelayLoad) -> Result<Vec<Channel>, BenchError> {
        let mut channels = Vec::with_capacity(load.relays);
        for _ in 0..load.relays {
            channels.push(self.raw_confirm_channel().await?);
        }
        Ok(channels)
    }

    async fn raw_send(
        &self,
        ch: &Channel,
        part: &[OutgoingMessage],
        window: usize,
    ) -> Result<(), BenchError> {
        self.raw_publish(ch, part, window).await
    }

    async fn close_senders(&self, channels: Vec<Channel>) {
        for ch in channels {
            let _ = ch.close(200, "done").await;
        }
    }

    /// The work queue held them all (purged for the next round).
    async fn check_arrived(&self, n: usize, _confirmed: Option<usize>) -> Result<(), BenchError> {
        let got = self.purge().await? as usize;
        if got == n {
            Ok(())
        } else {
            Err(BenchError::Stalled(format!(
                "{got} of {n} messages reached the queue"
            )))
        }
    }
}
