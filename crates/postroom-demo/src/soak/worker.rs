//! The soak's processes: one producer, relays and consumers, each its own OS process that
//! runs until its standard input closes (or it is killed).

use crate::args::SoakWorkerArgs;
use crate::demo::consumer::inventory_decoder;
use crate::process::stop_on_stdin_eof;
use crate::shop::handlers::{HashedFaults, InventoryHandler, RejectionHandler};
use crate::shop::{INVENTORY, INVENTORY_TOPICS, NewOrder, ORDERS, ORDERS_TOPICS};
use crate::stack::{Stack, open_child};
use postroom_core::{
    BatchConfig, BatchConsumer, BreakerConfig, Consumer, ConsumerConfig, MessageId, Ordering,
    OutboxRelay, OutgoingMessage, RelayConfig, RetryLadder, RetryPolicy, Route,
};
use postroom_ops::{OpsError, OpsResult};
use std::sync::Arc;
use std::time::Duration;

/// The hidden subcommand that runs these processes.
pub const COMMAND: &str = "soak-worker";

/// Lease (visibility timeout) of soak deliveries: a killed consumer's messages come back after it.
pub const LEASE: Duration = Duration::from_secs(5);
/// Orders per producer transaction.
const BATCH: usize = 50;

/// A deterministic number in [0, 1) for `(i, salt)`.
pub fn unit(i: u64, salt: u64) -> f64 {
    let mut z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Run one soak process.
pub async fn run(args: SoakWorkerArgs) -> OpsResult {
    // The batched consumer's lanes each gather a batch: room in flight for two batches.
    let prefetch = match args.batch_size {
        0 => 16,
        n => (n as usize * 2).clamp(16, 256),
    };
    let (stack, ladder) = open_child(&args.child, LEASE, prefetch).await?;
    let done = run_role(&stack, &args, ladder).await;
    stack.close().await;
    done
}

async fn run_role(stack: &Stack, args: &SoakWorkerArgs, ladder: RetryLadder) -> OpsResult {
    match args.role.as_str() {
        "producer" => produce(stack, args).await,
        "relay" => {
            let relay = OutboxRelay::new(
                stack.outbox.clone(),
                stack.publisher(),
                RelayConfig {
                    relay_id: format!("relay-{}-{}", args.id, std::process::id()),
                    batch_size: 100,
                    lease: LEASE,
                    idle_wait: Duration::from_millis(50),
                    retry_after: Duration::from_millis(500),
                    retention: None,
                    lanes: 1,
                },
            );
            println!("READY relay {}", std::process::id());
            relay.run(stop_on_stdin_eof()).await;
            Ok(())
        }
        "consumer" => consume(stack, args, ladder).await,
        other => Err(OpsError::usage(format!("unknown role {other}"))),
    }
}

/// The retry policy of soak consumers: the ladder, its last stage repeated up to five retries
/// (so that a version gap outlives a killed consumer's lease).
pub fn policy(ladder: RetryLadder) -> RetryPolicy {
    RetryPolicy {
        max_retries: 5,
        max_unknown_retries: 1,
        max_age: Some(Duration::from_secs(3600)),
        jitter: 0.2,
        ladder,
    }
}

async fn consume(stack: &Stack, args: &SoakWorkerArgs, ladder: RetryLadder) -> OpsResult {
    let stop = stop_on_stdin_eof();
    let mut icfg = ConsumerConfig::new(INVENTORY, inventory_decoder());
    icfg.concurrency = 8;
    icfg.retry = policy(ladder.clone());
    icfg.breaker = BreakerConfig {
        failure_threshold: 0,
        cooldown: Duration::from_secs(1),
    };
    icfg.version = env!("CARGO_PKG_VERSION").into();
    let hashed = (args.transient_share > 0.0).then_some(HashedFaults {
        share: args.transient_share,
        times: 2,
    });
    let handler = Arc::new(InventoryHandler {
        db: stack.shop.clone(),
        crash_order: None,
        hashed,
    });
    let batch = (args.batch_size > 0).then_some(BatchConfig {
        max_size: args.batch_size as usize,
        linger: Duration::from_millis(20),
    });
    if batch.is_some() {
        // One key in one lane, in order: a batch never holds a key another lane is applying.
        icfg.ordering = Ordering::PerKey;
    }
    let orders = RejectionHandler::consumer(stack.shop.clone(), 2, policy(ladder));
    let isub = stack.subscribe(INVENTORY, INVENTORY_TOPICS).await?;
    let osub = stack.subscribe(ORDERS, ORDERS_TOPICS).await?;
    println!("READY consumer {}", std::process::id());
    let stop2 = stop.clone();
    let inventory = async move {
        match batch {
            Some(batch) => {
                BatchConsumer::new(icfg, batch, handler)
                    .run(isub, stop)
                    .await
            }
            None => Consumer::new(icfg, handler).run(isub, stop).await,
        }
    };
    tokio::join!(inventory, orders.run(osub, stop2));
    Ok(())
}

async fn produce(stack: &Stack, args: &SoakWorkerArgs) -> OpsResult {
    let (mut orders, mut messages) = stack.shop.produced().await?;
    let mut poison_due = 0.0;
    // Paced from where this process starts (a restarted producer resumes the count).
    let (paced_from, start) = (messages, tokio::time::Instant::now());
    while messages < args.messages {
        if args.rate > 0.0 {
            let due = Duration::from_secs_f64((messages - paced_from) as f64 / args.rate);
            tokio::time::sleep_until(start + due).await;
        }
        let mut batch = Vec::with_capacity(BATCH);
        let mut batch_msgs = 0;
        while batch.len() < BATCH && messages + batch_msgs < args.messages {
            orders += 1;
            let oos = unit(orders, 1) < args.out_of_stock_share;
            let cancel = !oos
                && unit(orders, 2) < args.cancel_share
                && messages + batch_msgs + 2 <= args.messages;
            batch.push(NewOrder {
                id: format!("o-{orders:07}"),
                sku: if oos { "NONE".into() } else { "WIDGET".into() },
                qty: 1 + (orders % 3) as i64,
                fail_times: None,
                cancel,
            });
            batch_msgs += if cancel { 2 } else { 1 };
        }
        stack.shop.create_orders(&batch, "soak-producer").await?;
        messages += batch_msgs;
        poison_due += batch_msgs as f64 * args.poison_share;
        let mut poison = Vec::new();
        while poison_due >= 1.0 && messages < args.messages {
            poison_due -= 1.0;
            messages += 1;
            poison.push(OutgoingMessage {
                id: MessageId::new(),
                route: Route::Topic("order.created".into()),
                headers: Default::default(),
                body: format!("{{\"id\": \"poison-{messages}\", broken").into_bytes(),
            });
        }
        if !poison.is_empty() {
            stack.shop.enqueue_poison(&poison).await?;
        }
    }
    println!("DONE {messages}");
    Ok(())
}
