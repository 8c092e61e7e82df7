//! How long a received message stays ours. A receive hides the message for the visibility
//! timeout; while the handler runs, a heartbeat task per unsettled delivery extends it
//! (`ChangeMessageVisibility` to the full timeout every third of it). The lease knows until
//! when the message is surely hidden: once that moment has passed unsettled, the message may
//! already be with another consumer — "ownership lost, a duplicate may come" — which is
//! counted, never a crash; the settling act still goes ahead (the inbox absorbs the repeat).
//!
//! A settling act holds the lease while it talks to SQS, so no extension can land after a
//! retry's own visibility change and shorten the retry's delay. (One case is left: an
//! extension request that timed out on our side may still reach SQS later; with a visibility
//! timeout of seconds and a request timeout of the same length this needs a request delayed
//! in the network for longer than the timeout.) Dropping the delivery unsettled
//! (a crash) stops the heartbeat; SQS gives the message out again when the timeout runs out.

use crate::error::{code_of, is_ownership_lost};
use crate::subscriber::QueueContext;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, OwnedMutexGuard};

#[derive(Debug)]
pub(crate) struct LeaseState {
    /// Until when the message is surely hidden from other consumers.
    visible_until: Instant,
    /// Settled (deleted, hidden for a retry, released): the heartbeat stops.
    settled: bool,
    /// Ownership was lost (counted once).
    lost: bool,
}

/// The lease of one delivery.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) receipt: String,
    /// When the receive that brought the message was sent.
    pub(crate) received_at: Instant,
    state: Arc<Mutex<LeaseState>>,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
}

/// The lease held by a settling act; the heartbeat waits meanwhile.
pub(crate) struct Held {
    state: OwnedMutexGuard<LeaseState>,
    ctx: Arc<QueueContext>,
}

impl Held {
    /// Whether ownership is lost by now (counted the first time it is seen).
    pub(crate) fn check_lost(&mut self) -> bool {
        if !self.state.lost && Instant::now() >= self.state.visible_until {
            self.mark_lost();
        }
        self.state.lost
    }

    /// SQS said the receipt no longer owns the message.
    pub(crate) fn mark_lost(&mut self) {
        mark_lost(&mut self.state, &self.ctx);
    }

    /// The act settled the delivery: no more extensions.
    pub(crate) fn settle(mut self) {
        self.state.settled = true;
    }
}

impl Lease {
    /// The lease of a message received by a call sent at `received_at`; starts the heartbeat
    /// when the queue's settings say so.
    pub(crate) fn start(ctx: &Arc<QueueContext>, receipt: String, received_at: Instant) -> Self {
        let state = Arc::new(Mutex::new(LeaseState {
            visible_until: received_at + ctx.visibility,
            settled: false,
            lost: false,
        }));
        let heartbeat = ctx
            .extend
            .then(|| tokio::spawn(heartbeat(ctx.clone(), receipt.clone(), state.clone())));
        Self {
            receipt,
            received_at,
            state,
            heartbeat,
        }
    }

    /// Hold the lease for a settling act.
    pub(crate) async fn hold(&self, ctx: &Arc<QueueContext>) -> Held {
        Held {
            state: self.state.clone().lock_owned().await,
            ctx: ctx.clone(),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
    }
}

fn mark_lost(state: &mut LeaseState, ctx: &QueueContext) {
    if !state.lost {
        state.lost = true;
        ctx.stats.record_ownership_lost(&ctx.consumer);
        tracing::warn!(queue = %ctx.queue_name, "ownership of a message lost before it settled (its visibility timeout ran out): another consumer may get it, the inbox absorbs the duplicate");
    }
}

async fn heartbeat(ctx: Arc<QueueContext>, receipt: String, state: Arc<Mutex<LeaseState>>) {
    let period = (ctx.visibility / 3).max(Duration::from_millis(200));
    let seconds = i32::try_from(ctx.visibility.as_secs().max(1)).unwrap_or(i32::MAX);
    loop {
        tokio::time::sleep(period).await;
        let mut s = state.lock().await;
        if s.settled || s.lost {
            return;
        }
        if Instant::now() >= s.visible_until {
            mark_lost(&mut s, &ctx);
            return;
        }
        let sent = Instant::now();
        let call = ctx
            .client
            .change_message_visibility()
            .queue_url(&ctx.queue_url)
            .receipt_handle(&receipt)
            .visibility_timeout(seconds)
            .send();
        match tokio::time::timeout(ctx.visibility, call).await {
            Ok(Ok(_)) => {
                s.visible_until = sent + ctx.visibility;
                ctx.stats.record_extended();
            }
            Ok(Err(e)) => {
                if code_of(&e).is_some_and(|(c, m)| is_ownership_lost(c, m)) {
                    mark_lost(&mut s, &ctx);
                    return;
                }
                tracing::warn!(error = %crate::error::sdk("extending visibility", e), "visibility extension failed; trying again");
            }
            Err(_) => tracing::warn!("visibility extension timed out; trying again"),
        }
    }
}
