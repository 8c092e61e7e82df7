//! `postroom demo`: the orders → inventory example of the source article, end to end, with
//! its faults injected (see [`crate::shop`] for the model).
//!
//! Faults: transient database failures that heal within the retry budget (one retry through
//! each ladder stage) and one that outlasts it; corrupt JSON and an unknown schema version;
//! out-of-stock orders (a business outcome published through the consumer's own outbox);
//! cancellations (aggregate version 2) applied only after version 1; duplicate deliveries;
//! and the inventory consumer — a separate OS process — killed with SIGKILL between its
//! COMMIT and its ack, then restarted.

pub mod child;
pub mod report;

use crate::cli::DemoArgs;
use crate::error::{CliError, CliErrorKind, CliResult};
use crate::shop::handlers::RejectionHandler;
use crate::shop::{INVENTORY, INVENTORY_TOPICS, NewOrder, ORDERS, ORDERS_TOPICS};
use crate::stack::{DatabaseUrl, Stack};
use crate::worker::Worker;
use postroom_core::{
    Consumer, ConsumerConfig, Envelope, EnvelopeDecoder, MessageId, OutboxRelay, OutgoingMessage,
    ParkedMessage, ParkingFilter, RelayConfig, RetryLadder, Route,
};
use report::DemoReport;
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, watch};

/// Queue and exchange prefix of the demo on RabbitMQ.
pub const WORKLOAD: &str = "postroom-demo";
/// The order whose consumer is killed between COMMIT and ack.
const CRASH_ORDER: &str = "ord-00010";
/// Orders republished with the same id (duplicate deliveries).
const DUPLICATED: [&str; 3] = ["ord-00011", "ord-00012", "ord-00013"];

/// Run the demo.
pub async fn run(args: DemoArgs) -> CliResult {
    let ladder: RetryLadder = args.ladder.parse().map_err(CliError::usage)?;
    let database = DatabaseUrl::parse(&args.database)?;
    if let DatabaseUrl::Sqlite(path) = &database {
        prepare_file(path).await?;
    }
    let started = Instant::now();
    let workload = crate::shop::workload(WORKLOAD, ladder.clone());
    let stack = Stack::open(
        &database,
        args.broker.as_deref().map(|b| (b, &workload, true)),
        child::LEASE,
        4,
    )
    .await?;
    stack.shop.reset().await?;
    // Bind both consumers before anything is published, so nothing is unroutable.
    stack.bind(INVENTORY, INVENTORY_TOPICS).await?;
    stack.bind(ORDERS, ORDERS_TOPICS).await?;
    eprintln!(
        "postroom demo: database {}, ladder {ladder}, {} orders",
        database.to_arg(),
        args.orders
    );
    let poison_ids = produce(&stack, args.orders).await?;

    let (stop, stop_rx) = watch::channel(false);
    let ingest_tasks = match &stack.transport {
        crate::stack::Transport::Rabbit(r) => {
            r.spawn_parking_ingest(stack.shop.parking(), &stop_rx)
        }
        _ => Vec::new(),
    };
    let relay = OutboxRelay::new(
        stack.shop.outbox(),
        stack.publisher(),
        RelayConfig {
            relay_id: "demo-relay".into(),
            idle_wait: Duration::from_millis(100),
            ..RelayConfig::default()
        },
    );
    let relay_task = tokio::spawn({
        let rx = stop_rx.clone();
        async move { relay.run(rx).await }
    });
    let mut ocfg = ConsumerConfig::new(
        ORDERS,
        EnvelopeDecoder::new().accept("inventory.reservation_rejected", 1..=1),
    );
    ocfg.retry = child::policy(ladder.clone());
    let orders_consumer = Consumer::new(
        ocfg,
        Arc::new(RejectionHandler {
            db: stack.shop.clone(),
        }),
    );
    let orders_sub = stack.subscribe(ORDERS, ORDERS_TOPICS).await?;
    let orders_task = tokio::spawn({
        let rx = stop_rx.clone();
        async move { orders_consumer.run(orders_sub, rx).await }
    });

    let kills = Arc::new(AtomicU64::new(0));
    let mut args_child: Vec<OsString> = vec![
        "demo-consumer".into(),
        "--database".into(),
        database.to_arg().into(),
        "--ladder".into(),
        args.ladder.clone().into(),
        "--crash-order".into(),
        CRASH_ORDER.into(),
    ];
    if let Some(b) = &args.broker {
        args_child.extend(["--broker".into(), b.into()]);
    }
    let worker = Arc::new(Mutex::new(None::<Worker>));
    let sup_task = tokio::spawn(supervise(
        args_child,
        worker.clone(),
        kills.clone(),
        stop_rx.clone(),
    ));

    let injected = inject_duplicates(&stack).await?;
    let settled = wait_until_settled(&stack, &ladder, &poison_ids, args.timeout_secs, &kills).await;

    let _ = stop.send(true);
    let _ = sup_task.await;
    if let Some(w) = worker.lock().await.take() {
        w.stop(Duration::from_secs(10)).await;
    }
    let _ = relay_task.await;
    let _ = orders_task.await;
    for t in ingest_tasks {
        let _ = t.await;
    }

    let parked = parked_of(&stack).await?;
    let ids: Vec<MessageId> = parked.iter().map(|p| p.message_id).collect();
    let mut report = DemoReport::from_facts(&stack.shop.facts(&ids).await?, &parked, &ladder);
    report.duplicates_injected = injected;
    report.consumer_kills = kills.load(Ordering::SeqCst);
    report.killed_order = Some(CRASH_ORDER.into());
    report.killed_order_reservations = stack.shop.reservations_of(CRASH_ORDER).await?;
    report.killed_order_redelivered = stack.shop.duplicate_seen_for(CRASH_ORDER).await?;
    report.elapsed_s = started.elapsed().as_secs_f64();
    report.check(&ladder, &poison_ids);
    if let Err(e) = settled {
        report.failures.push(e);
    }
    report.print();
    if let Some(p) = &args.report_json {
        let json = serde_json::to_string_pretty(&report).expect("report serialises");
        std::fs::write(p, json)
            .map_err(|e| CliError::usage(format!("cannot write report {}: {e}", p.display())))?;
    }
    match &database {
        DatabaseUrl::Sqlite(p) => eprintln!(
            "look at the parked messages: postroom parking list --database {}",
            p.display()
        ),
        DatabaseUrl::Postgres(_) => eprintln!(
            "look at the parked messages: postroom parking list --database <url> --table-prefix {}",
            crate::shop::postgres::PREFIX
        ),
    }
    if report.failures.is_empty() {
        Ok(())
    } else {
        Err(CliError {
            kind: CliErrorKind::InvariantFailed,
            message: format!("{} invariant(s) failed", report.failures.len()),
        })
    }
}

async fn parked_of(stack: &Stack) -> CliResult<Vec<ParkedMessage>> {
    let filter = ParkingFilter {
        consumer: Some(INVENTORY.into()),
        include_redriven: true,
        ..ParkingFilter::default()
    };
    Ok(stack.shop.parking().search(&filter, 100_000).await?)
}

/// Remove a previous demo (or soak) database; refuse to touch any other file.
pub(crate) async fn prepare_file(path: &Path) -> CliResult {
    if !path.exists() {
        return Ok(());
    }
    let is_demo = match postroom_sqlite::SqliteStore::open(path).await {
        Ok(s) => {
            sqlx::query_scalar::<_, String>("SELECT value FROM shop_meta WHERE key = 'created_by'")
                .fetch_optional(s.pool())
                .await
                .ok()
                .flatten()
                .is_some()
        }
        Err(_) => false,
    };
    if !is_demo {
        return Err(CliError::usage(format!(
            "{} exists and is not a postroom demo database; pass another --database",
            path.display()
        )));
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}

/// The orders of the demo and their faults.
fn orders(n: u32) -> Vec<NewOrder> {
    (1..=n)
        .map(|i| {
            // Orders 4..=7 want the two RARE items; order 8 wants more GADGETs than there are.
            let (sku, qty) = match i {
                4..=7 => ("RARE", 1),
                8 => ("GADGET", 5),
                _ => ("WIDGET", 1 + i64::from(i % 3)),
            };
            NewOrder {
                id: format!("ord-{i:05}"),
                sku: sku.into(),
                qty,
                // Heal after 1, 2 and 3 failures (a retry through each stage); one never heals.
                fail_times: match i {
                    1 => Some(1),
                    2 => Some(2),
                    3 => Some(3),
                    9 => Some(99),
                    _ => None,
                },
                cancel: matches!(i, 14 | 15),
            }
        })
        .collect()
}

/// Orders through the outbox (one transaction per order), then two poison messages.
async fn produce(stack: &Stack, n: u32) -> CliResult<Vec<String>> {
    for o in orders(n) {
        stack
            .shop
            .create_orders(std::slice::from_ref(&o), "orders")
            .await?;
    }
    let corrupt = OutgoingMessage {
        id: MessageId::new(),
        route: Route::Topic("order.created".into()),
        headers: [("x-message-type".to_string(), "order.created".to_string())].into(),
        body: b"{\"id\": \"oops\", \"type\": order.created, truncated".to_vec(),
    };
    let v99 = Envelope::builder("order.created", "orders-next")
        .schema_version(99)
        .aggregate("order", "ord-from-the-future", 1)
        .data(serde_json::json!({"order_id": "ord-from-the-future", "lines": []}))
        .build();
    let v99 = OutgoingMessage::from_envelope(&v99, "order.created");
    stack
        .shop
        .enqueue_poison(&[corrupt.clone(), v99.clone()])
        .await?;
    Ok(vec![corrupt.id.to_string(), v99.id.to_string()])
}

/// Publish a few already-relayed orders again with the same id: duplicate deliveries.
async fn inject_duplicates(stack: &Stack) -> CliResult<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let ids: Vec<String> = DUPLICATED.iter().map(|s| (*s).to_string()).collect();
    loop {
        let events = stack.shop.published_events(&ids).await?;
        if events.len() == ids.len() {
            let publisher = stack.publisher();
            for m in &events {
                publisher.publish(m).await?;
            }
            return Ok(events.len() as u64);
        }
        if Instant::now() > deadline {
            return Err(CliError::failed(
                "the relay did not publish the first orders within 30 s",
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait until every message is resolved and nothing is in flight, printing progress.
async fn wait_until_settled(
    stack: &Stack,
    ladder: &RetryLadder,
    poison_ids: &[String],
    timeout_secs: u64,
    kills: &AtomicU64,
) -> Result<(), String> {
    let started = Instant::now();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    // Broker figures lag: quiescence must then hold for a while before it counts.
    let hold = if stack.lagging_figures() {
        Duration::from_secs(7)
    } else {
        Duration::ZERO
    };
    let mut quiet_since: Option<Instant> = None;
    loop {
        let parked = parked_of(stack).await.map_err(|e| e.to_string())?;
        let ids: Vec<MessageId> = parked.iter().map(|p| p.message_id).collect();
        let facts = stack.shop.facts(&ids).await.map_err(|e| e.to_string())?;
        let r = DemoReport::from_facts(&facts, &parked, ladder);
        // A broker figure that cannot be read now counts as "not quiet yet".
        let in_flight = stack.in_flight().await.unwrap_or(u64::MAX);
        let pending = stack
            .shop
            .outbox()
            .pending()
            .await
            .map_err(|e| e.to_string())?;
        let poison_parked = poison_ids
            .iter()
            .all(|id| r.parked_messages.iter().any(|p| &p.id == id));
        let killed = kills.load(Ordering::SeqCst);
        if last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            let stages: Vec<String> = r
                .retries_by_stage
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            eprintln!(
                "[{:>5.1}s] resolved {}/{} | reserved {} | rejected {} | cancelled {} | parked {} | retries {} | duplicates absorbed {} | kills {killed} | in flight {} | outbox {pending}",
                started.elapsed().as_secs_f64(),
                r.messages - r.lost,
                r.messages,
                r.reserved,
                r.rejected,
                r.cancelled,
                r.parked,
                if stages.is_empty() {
                    "-".into()
                } else {
                    stages.join(" ")
                },
                r.duplicates_absorbed,
                if in_flight == u64::MAX {
                    "?".to_string()
                } else {
                    in_flight.to_string()
                },
            );
        }
        if r.lost == 0
            && poison_parked
            && in_flight == 0
            && pending == 0
            && killed > 0
            && r.duplicates_absorbed >= DUPLICATED.len() as u64
        {
            let since = *quiet_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= hold {
                return Ok(());
            }
        } else {
            quiet_since = None;
        }
        if started.elapsed() > Duration::from_secs(timeout_secs) {
            return Err(format!("the demo did not settle within {timeout_secs} s"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Run the inventory consumer process; when it reports its crash point, SIGKILL and restart it.
async fn supervise(
    args: Vec<OsString>,
    slot: Arc<Mutex<Option<Worker>>>,
    kills: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let mut w = match Worker::spawn(args.clone()) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("cannot start the consumer process: {e}");
                return;
            }
        };
        let pid = w.pid();
        let mut lines = w.lines.take().expect("piped stdout");
        *slot.lock().await = Some(w);
        loop {
            tokio::select! {
                line = lines.next_line() => match line {
                    Ok(Some(l)) if l.starts_with("CRASH-POINT") => {
                        if let Some(mut w) = slot.lock().await.take() {
                            w.kill().await;
                        }
                        kills.fetch_add(1, Ordering::SeqCst);
                        eprintln!("         consumer process {pid} committed {} and was killed with SIGKILL before its ack; restarting it", l.trim_start_matches("CRASH-POINT "));
                        break;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => {
                        if *stop.borrow() { return; }
                        eprintln!("         consumer process {pid} exited unexpectedly; restarting it");
                        slot.lock().await.take();
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        break;
                    }
                },
                _ = stop.changed() => return,
            }
        }
    }
}
