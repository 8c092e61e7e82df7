//! The shared probe handler ([`postroom_testkit::probe`]) on a RabbitMQ subscriber.

// Each test binary uses a part of these.
#![allow(unused_imports)]

pub use postroom_testkit::probe::{Mode, Probe, Running, policy};

use postroom_core::{Consumer, MessageId, Ordering, RetryPolicy};
use postroom_rabbitmq::{ConfirmingPublisher, RabbitSubscriber};
use std::sync::Arc;
use std::time::Duration;

/// Run the core consumer loop on `sub` with `handler`.
pub fn run(
    sub: RabbitSubscriber,
    name: &str,
    handler: Arc<Probe>,
    retry: RetryPolicy,
    concurrency: usize,
) -> Running {
    let cfg = postroom_testkit::probe::config(name, retry, concurrency, Ordering::Unordered);
    postroom_testkit::probe::spawn(Consumer::new(cfg, handler), sub)
}

/// Run `handler` as `consumer` on a new subscriber of `t` with `prefetch`, whose retries and
/// parkings go through `publisher`.
pub fn run_probe(
    t: &super::TestRabbit,
    consumer: &str,
    prefetch: u16,
    publisher: &Arc<ConfirmingPublisher>,
    handler: &Arc<Probe>,
    retry: RetryPolicy,
    concurrency: usize,
) -> Running {
    run(
        t.subscriber(consumer, prefetch, publisher.clone()),
        consumer,
        handler.clone(),
        retry,
        concurrency,
    )
}
