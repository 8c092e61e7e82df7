//! A long-running outbox relay for services written in any language: they insert rows into
//! the documented outbox table in their own transactions, and this publishes them with the
//! transport's confirmations through the core's [`OutboxRelay`] (claims with leases, so
//! several relays may run at once; per-aggregate order kept). Shutting down drains: the
//! batch being published is confirmed and marked, what was claimed and not sent is given
//! back.

use crate::endpoint::Endpoint;
use crate::error::{OpsError, OpsResult};
use crate::registry::Registry;
use crate::workload::{TransportSpec, Workload};
use postroom::Stack;
use postroom_core::{
    FanOutPublisher, OutboxRelay, PublishTarget, Publisher, RelayConfig, Subscription, Transport,
    metrics as m,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How often the relay counts the unpublished rows for its gauge.
const PENDING_EVERY: Duration = Duration::from_secs(5);

/// Bind the workload's consumers (so that nothing the relay publishes is unroutable), then
/// relay `stack`'s outbox until `shutdown` turns true, draining before it returns.
pub async fn run_relay(
    stack: &Stack,
    config: RelayConfig,
    prefetch: usize,
    shutdown: watch::Receiver<bool>,
) -> OpsResult {
    run_relay_to(stack, &[], config, prefetch, shutdown).await
}

/// [`run_relay`] publishing every row to `stack`'s transport and to each of `also` too,
/// with the same message id: a row is marked published only when every one of them
/// confirmed it (see [`FanOutPublisher`]). The workload's consumers are bound on each.
pub async fn run_relay_to(
    stack: &Stack,
    also: &[Arc<dyn Transport>],
    config: RelayConfig,
    prefetch: usize,
    shutdown: watch::Receiver<bool>,
) -> OpsResult {
    for c in &stack.workload().consumers {
        let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
        stack.bind(&c.name, &routes, prefetch).await?;
    }
    for t in also {
        bind_workload(t.as_ref(), stack.workload(), prefetch).await?;
    }
    relay_through(
        stack,
        publisher_to(stack.transport(), also)?,
        config,
        shutdown,
    )
    .await
}

/// Bind `workload`'s consumers on `transport`, so that nothing published to it is unroutable.
async fn bind_workload(
    transport: &dyn Transport,
    workload: &Workload,
    prefetch: usize,
) -> OpsResult {
    for c in &workload.consumers {
        let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
        transport
            .bind(&Subscription::new(c.name.clone(), &routes).prefetch(prefetch))
            .await?;
    }
    Ok(())
}

/// Relay `stack`'s outbox through `publisher` until `shutdown`, counting the unpublished
/// rows for the pending gauge. A retention of zero deletes each row as its publish is
/// confirmed where the store can (PostgreSQL: in the statement that would mark it, the
/// cheapest relay), and at each purge elsewhere.
async fn relay_through(
    stack: &Stack,
    publisher: Arc<dyn Publisher>,
    config: RelayConfig,
    shutdown: watch::Receiver<bool>,
) -> OpsResult {
    let store = crate::store_of(stack)?;
    let deleting = config
        .retention
        .is_some_and(|r| r.is_zero())
        .then(|| store.deleting_outbox())
        .flatten();
    let outbox = deleting.unwrap_or_else(|| store.outbox());
    let relay = OutboxRelay::new(outbox.clone(), publisher, config);
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
    let all: Vec<Arc<dyn Transport>> = std::iter::once(first).chain(also).cloned().collect();
    Ok(Arc::new(FanOutPublisher::new(named_targets(&all))?))
}

/// A publish target for each transport, named after it (numbered when two share a name).
fn named_targets(transports: &[Arc<dyn Transport>]) -> Vec<PublishTarget> {
    let mut targets: Vec<PublishTarget> = Vec::with_capacity(transports.len());
    for t in transports {
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
    targets
}

/// The brokers listed in a brokers file: one URL per line; blank lines and lines starting
/// with `#` are skipped. At least one, none twice.
pub fn parse_brokers_file(text: &str) -> OpsResult<Vec<Endpoint>> {
    let mut brokers: Vec<Endpoint> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let endpoint = Endpoint::broker(line)
            .map_err(|e| OpsError::usage(format!("line {}: {}", n + 1, e.message())))?;
        if brokers.iter().any(|b| b.expose() == endpoint.expose()) {
            return Err(OpsError::usage(format!(
                "line {}: {} is listed twice",
                n + 1,
                endpoint.redacted()
            )));
        }
        brokers.push(endpoint);
    }
    if brokers.is_empty() {
        return Err(OpsError::usage(
            "it lists no broker (one URL per line; # starts a comment)",
        ));
    }
    Ok(brokers)
}

/// The text of the brokers file at `path` and the brokers it lists.
pub fn read_brokers_file(path: &Path) -> OpsResult<(String, Vec<Endpoint>)> {
    let text = crate::error::read_text(path, "brokers")?;
    let brokers = parse_brokers_file(&text)
        .map_err(|e| OpsError::usage(format!("brokers file {}: {}", path.display(), e.message)))?;
    Ok((text, brokers))
}

/// How often a brokers file is checked for changes.
const BROKERS_FILE_EVERY: Duration = Duration::from_secs(1);

/// The brokers a relay publishes to now, each with the URL it was listed under.
type Targets = Vec<(String, Arc<dyn Transport>)>;

/// Told the names of the brokers a following relay publishes to, at start and at each change.
pub type OnTargets = Arc<dyn Fn(&[String]) + Send + Sync>;

/// Relay `stack`'s outbox to every broker listed in `file`, following the file while it
/// runs: when its text changes (checked every second) or `reload` is notified (SIGHUP), the
/// new brokers are opened and bound and the relay publishes to the new list from its next
/// batch on; brokers no longer listed are closed once the batches in flight had time to be
/// confirmed (`config.lease`). A list that cannot be read, parsed or opened is reported and
/// the list in use is kept. `on_targets` is called with the targets' names at start and at
/// each change; the gauge `postroom_relay_target{target}` is 1 for each.
#[allow(clippy::too_many_arguments)]
pub async fn run_relay_following(
    stack: &Stack,
    registry: Registry,
    spec: &TransportSpec,
    file: &Path,
    config: RelayConfig,
    prefetch: usize,
    reload: Arc<Notify>,
    on_targets: OnTargets,
    shutdown: watch::Receiver<bool>,
) -> OpsResult {
    let (mut seen, brokers) = read_brokers_file(file)?;
    let workload = stack.workload().clone();
    let current = open_targets(&registry, spec, &workload, prefetch, &brokers, &[]).await?;
    let names = announce(&current, &[], on_targets.as_ref());
    let fan_out = FanOutPublisher::new(named_targets(&transports(&current)))?;
    debug_assert_eq!(fan_out.target_names(), names);
    let live = Arc::new(tokio::sync::Mutex::new(current));

    let follower = {
        let (spec, file) = (spec.clone(), file.to_path_buf());
        let (fan_out, live, mut stop) = (fan_out.clone(), live.clone(), shutdown.clone());
        let lease = config.lease;
        tokio::spawn(async move {
            loop {
                let forced = tokio::select! {
                    () = tokio::time::sleep(BROKERS_FILE_EVERY) => false,
                    () = reload.notified() => true,
                    r = stop.changed() => if r.is_err() || *stop.borrow() { break } else { continue },
                };
                let (text, brokers) = match read_brokers_file(&file) {
                    Ok(r) => r,
                    Err(e) => {
                        let text = std::fs::read_to_string(&file).unwrap_or_default();
                        if forced || text != seen {
                            tracing::error!(error = %e, "the brokers file cannot be used: still publishing to the brokers listed before");
                            seen = text;
                        }
                        continue;
                    }
                };
                if text == seen && !forced {
                    continue;
                }
                seen = text;
                let mut current = live.lock().await;
                let wanted: Vec<&str> = brokers.iter().map(Endpoint::expose).collect();
                let have: Vec<&str> = current.iter().map(|(u, _)| u.as_str()).collect();
                if wanted == have {
                    continue;
                }
                let next = match open_targets(
                    &registry, &spec, &workload, prefetch, &brokers, &current,
                )
                .await
                {
                    Ok(next) => next,
                    Err(e) => {
                        tracing::error!(error = %e, "a broker of the brokers file cannot be opened: still publishing to the brokers listed before");
                        continue;
                    }
                };
                if let Err(e) = fan_out.set_targets(named_targets(&transports(&next))) {
                    tracing::error!(error = %e, "the new list of brokers was refused: still publishing to the brokers listed before");
                    continue;
                }
                announce(&next, &current, on_targets.as_ref());
                let gone: Targets = current
                    .iter()
                    .filter(|(u, _)| !next.iter().any(|(n, _)| n == u))
                    .cloned()
                    .collect();
                *current = next;
                if !gone.is_empty() {
                    // Batches that began on the old list are confirmed or given back within
                    // a lease; then the brokers no longer listed are closed.
                    tokio::spawn(async move {
                        tokio::time::sleep(lease).await;
                        for (_, t) in gone {
                            t.close().await;
                        }
                    });
                }
            }
        })
    };

    let relayed = relay_through(stack, Arc::new(fan_out), config, shutdown).await;
    let _ = follower.await;
    for (_, t) in live.lock().await.iter() {
        t.close().await;
    }
    relayed
}

fn transports(targets: &[(String, Arc<dyn Transport>)]) -> Vec<Arc<dyn Transport>> {
    targets.iter().map(|(_, t)| t.clone()).collect()
}

/// The transports for `brokers`: the ones already in `current` kept, the others opened and
/// bound for `workload`. When one cannot be opened, the ones opened here are closed again.
async fn open_targets(
    registry: &Registry,
    spec: &TransportSpec,
    workload: &Workload,
    prefetch: usize,
    brokers: &[Endpoint],
    current: &[(String, Arc<dyn Transport>)],
) -> OpsResult<Targets> {
    let mut next: Targets = Vec::with_capacity(brokers.len());
    let mut opened: Vec<Arc<dyn Transport>> = Vec::new();
    for b in brokers {
        if let Some((u, t)) = current.iter().find(|(u, _)| u == b.expose()) {
            next.push((u.clone(), t.clone()));
            continue;
        }
        let made = async {
            let t = registry.open_transport(b, spec).await?;
            opened.push(t.clone());
            bind_workload(t.as_ref(), workload, prefetch).await?;
            OpsResult::Ok(t)
        }
        .await;
        match made {
            Ok(t) => next.push((b.expose().to_string(), t)),
            Err(e) => {
                for t in opened {
                    t.close().await;
                }
                return Err(e);
            }
        }
    }
    Ok(next)
}

/// Set the target gauges (1 for each of `now`, 0 for each of `before` no longer there) and
/// tell `on_targets`; returns the names.
fn announce(
    now: &[(String, Arc<dyn Transport>)],
    before: &[(String, Arc<dyn Transport>)],
    on_targets: &(dyn Fn(&[String]) + Send + Sync),
) -> Vec<String> {
    let names: Vec<String> = named_targets(&transports(now))
        .into_iter()
        .map(|t| t.name)
        .collect();
    for old in named_targets(&transports(before)) {
        if !names.contains(&old.name) {
            metrics::gauge!(m::RELAY_TARGET, "target" => old.name).set(0.0);
        }
    }
    for n in &names {
        metrics::gauge!(m::RELAY_TARGET, "target" => n.clone()).set(1.0);
    }
    on_targets(&names);
    names
}
