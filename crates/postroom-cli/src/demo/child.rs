//! The inventory consumer as its own OS process, so the demo can SIGKILL it.
//! It runs until its standard input closes, then shuts down gracefully.

use super::inventory::{CONSUMER, InventoryHandler};
use crate::cli::DemoConsumerArgs;
use crate::error::{CliError, CliResult};
use postroom_core::{
    BreakerConfig, Consumer, ConsumerConfig, EnvelopeDecoder, RetryLadder, RetryPolicy,
};
use postroom_sqlite::{SqliteStore, SubscribeOptions};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// How long a delivery stays leased in the demo before it is delivered again.
pub const LEASE: Duration = Duration::from_secs(2);

/// The retry policy the demo uses on `ladder`.
pub fn policy(ladder: RetryLadder) -> RetryPolicy {
    RetryPolicy {
        max_retries: ladder.len() as u32,
        max_unknown_retries: 1,
        max_age: Some(Duration::from_secs(3600)),
        jitter: 0.1,
        ladder,
    }
}

/// Run the child.
pub async fn run(args: DemoConsumerArgs) -> CliResult {
    let ladder: RetryLadder = args.ladder.parse().map_err(CliError::usage)?;
    let store = SqliteStore::open(&args.database).await?;
    let sub = store
        .queue()
        .subscribe(
            CONSUMER,
            &["order.created"],
            SubscribeOptions {
                prefetch: 4,
                lease: LEASE,
                ..SubscribeOptions::default()
            },
        )
        .await?;
    let decoder = EnvelopeDecoder::new().accept("order.created", 1..=1);
    let mut cfg = ConsumerConfig::new(CONSUMER, decoder);
    cfg.version = env!("CARGO_PKG_VERSION").into();
    cfg.concurrency = 4;
    cfg.retry = policy(ladder);
    cfg.breaker = BreakerConfig {
        failure_threshold: 20,
        cooldown: Duration::from_millis(500),
    };
    let handler = Arc::new(InventoryHandler {
        store: store.clone(),
        crash_order: args.crash_order,
    });
    let consumer = Consumer::new(cfg, handler);
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        let _ = stop.send(true);
    });
    println!("READY {}", std::process::id());
    consumer.run(sub, rx).await;
    Ok(())
}
