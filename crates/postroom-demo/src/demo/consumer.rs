//! The inventory consumer as its own OS process, so the demo (and the soak) can SIGKILL it.
//! It runs until its standard input closes, then shuts down gracefully.

use crate::args::DemoConsumerArgs;
use crate::process::stop_on_stdin_eof;
use crate::shop::handlers::InventoryHandler;
use crate::shop::{INVENTORY, INVENTORY_TOPICS};
use crate::stack::open_child;
use postroom_core::{
    BreakerConfig, Consumer, ConsumerConfig, EnvelopeDecoder, RetryLadder, RetryPolicy,
};
use postroom_ops::OpsResult;
use std::sync::Arc;
use std::time::Duration;

/// The hidden subcommand that runs this process.
pub const COMMAND: &str = "demo-consumer";

/// How long a delivery stays leased in the demo before it is delivered again.
pub const LEASE: Duration = Duration::from_secs(2);

/// Rejections the demo's orders service handles at once.
pub const ORDERS_CONCURRENCY: usize = 4;

/// The retry policy the demo uses on `ladder`.
#[must_use]
pub fn policy(ladder: RetryLadder) -> RetryPolicy {
    RetryPolicy {
        max_retries: ladder.len() as u32,
        max_unknown_retries: 1,
        max_age: Some(Duration::from_secs(3600)),
        jitter: 0.1,
        ladder,
    }
}

/// What the inventory service accepts.
#[must_use]
pub fn inventory_decoder() -> EnvelopeDecoder {
    EnvelopeDecoder::new()
        .accept("order.created", 1..=1)
        .accept("order.cancelled", 1..=1)
}

/// Run the child.
pub async fn run(args: DemoConsumerArgs) -> OpsResult {
    let (stack, ladder) = open_child(&args.child, LEASE, 8).await?;
    let sub = stack.subscribe(INVENTORY, INVENTORY_TOPICS).await?;
    let mut cfg = ConsumerConfig::new(INVENTORY, inventory_decoder());
    cfg.version = env!("CARGO_PKG_VERSION").into();
    cfg.concurrency = 4;
    cfg.retry = policy(ladder);
    cfg.breaker = BreakerConfig {
        failure_threshold: 20,
        cooldown: Duration::from_millis(500),
    };
    let handler = Arc::new(InventoryHandler {
        db: stack.shop.clone(),
        crash_order: args.crash_order,
        hashed: None,
    });
    let consumer = Consumer::new(cfg, handler);
    let stop = stop_on_stdin_eof();
    println!("READY {}", std::process::id());
    consumer.run(sub, stop).await;
    stack.close().await;
    Ok(())
}
