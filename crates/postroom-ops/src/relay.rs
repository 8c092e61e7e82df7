//! A long-running outbox relay for services written in any language: they insert rows into
//! the documented outbox table in their own transactions, and this publishes them with the
//! transport's confirmations through the core's [`OutboxRelay`] (claims with leases, so
//! several relays may run at once; per-aggregate order kept). Shutting down drains: the
//! batch being published is confirmed and marked, what was claimed and not sent is given
//! back.

use crate::error::OpsResult;
use crate::pipeline::Pipeline;
use postroom_core::{
    FanOutPublisher, OutboxRelay, PublishTarget, Publisher, RelayConfig, Subscription, Transport,
    metrics as m,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the relay counts the unpublished rows for its gauge.
const PENDING_EVERY: Duration = Duration::from_secs(5);

/// Bind the workload's consumers (so that nothing the relay publishes is unroutable), then
/// relay `pipeline`'s outbox until `shutdown` turns true, draining before it returns.
pub async fn run_relay(
    pipeline: &Pipeline,
    config: RelayConfig,
    prefetch: usize,
    shutdown: watch::Receiver<bool>,
) -> OpsResult {
    run_relay_to(pipeline, &[], config, prefetch, shutdown).await
}

/// [`run_relay`] publishing every row to `pipeline`'s transport and to each of `also` too,
/// with the same message id: a row is marked published only when every one of them
/// confirmed it (see [`FanOutPublisher`]). The workload's consumers are bound on each.
pub async fn run_relay_to(
    pipeline: &Pipeline,
    also: &[Arc<dyn Transport>],
    config: RelayConfig,
    prefetch: usize,
    shutdown: watch::Receiver<bool>,
) -> OpsResult {
    for c in &pipeline.workload().consumers {
        let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
        pipeline.bind(&c.name, &routes, prefetch).await?;
        for t in also {
            t.bind(&Subscription::new(c.name.clone(), &routes).prefetch(prefetch))
                .await?;
        }
    }
    let outbox = pipeline.store.outbox();
    let relay = OutboxRelay::new(
        outbox.clone(),
        publisher_to(&pipeline.transport, also)?,
        config,
    );
    let gauge = {
        let mut stop = shutdown.clone();
        let outbox = outbox.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PENDING_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !*stop.borrow() {
                tokio::select! {
                    _ = tick.tick() => {}
                    r = stop.changed() => if r.is_err() { break },
                }
                match outbox.pending().await {
                    Ok(n) => metrics::gauge!(m::OUTBOX_PENDING).set(n as f64),
                    Err(e) => tracing::warn!(error = %e, "cannot count the outbox"),
                }
            }
        })
    };
    relay.run(shutdown).await;
    gauge.abort();
    Ok(())
}

/// The publisher of `first` alone, or a fan-out to `first` and every one of `also` (targets
/// named after their transports, numbered when two share a name).
pub fn publisher_to(
    first: &Arc<dyn Transport>,
    also: &[Arc<dyn Transport>],
) -> OpsResult<Arc<dyn Publisher>> {
    if also.is_empty() {
        return Ok(first.publisher());
    }
    let mut targets: Vec<PublishTarget> = Vec::with_capacity(also.len() + 1);
    for t in std::iter::once(first).chain(also) {
        let same = targets
            .iter()
            .filter(|x| x.name.split('#').next() == Some(t.name()))
            .count();
        let name = if same == 0 {
            t.name().to_string()
        } else {
            format!("{}#{}", t.name(), same + 1)
        };
        targets.push(PublishTarget::new(name, t.publisher()));
    }
    Ok(Arc::new(FanOutPublisher::new(targets)?))
}
