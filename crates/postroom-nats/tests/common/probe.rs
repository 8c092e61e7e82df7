//! The shared probe handler ([`postroom_testkit::probe`]) on a NATS subscription.

// Each test binary uses a part of these.
#![allow(unused_imports)]

pub use postroom_testkit::probe::{Mode, Probe, Running, policy};

use postroom_core::{Consumer, MessageId, Ordering, RetryPolicy, Subscription, Transport};
use postroom_nats::NatsTransport;
use std::sync::Arc;
use std::time::Duration;

/// Subscribe `name` on `routes` and run the core consumer loop with `handler`, checked
/// against the transport's capabilities.
pub async fn run(
    transport: &Arc<NatsTransport>,
    name: &str,
    routes: &[&str],
    handler: Arc<Probe>,
    retry: RetryPolicy,
    prefetch: usize,
    ordering: Ordering,
) -> Running {
    let sub = transport
        .subscribe(&Subscription::new(name, routes).prefetch(prefetch))
        .await
        .expect("subscribe");
    let mut cfg = postroom_testkit::probe::config(name, retry, prefetch, ordering);
    cfg.handler_timeout = std::time::Duration::from_secs(10);
    let consumer = Consumer::for_transport(cfg, handler, &transport.capabilities())
        .expect("the transport keeps the consumer's settings");
    postroom_testkit::probe::spawn(consumer, sub)
}

/// [`run`] in the common case: consumer `name` on `order.created`, unordered.
pub async fn run_on_orders(
    transport: &Arc<NatsTransport>,
    name: &str,
    handler: Arc<Probe>,
    retry: RetryPolicy,
    prefetch: usize,
) -> Running {
    run(
        transport,
        name,
        &["order.created"],
        handler,
        retry,
        prefetch,
        Ordering::Unordered,
    )
    .await
}
