//! `postroom demo`: the orders → inventory example of the source article, end to end, with
//! its faults injected (see [`crate::shop`] for the model).
//!
//! Faults: transient database failures that heal within the retry budget (one retry through
//! each ladder stage) and one that outlasts it; corrupt JSON and an unknown schema version;
//! out-of-stock orders (a business outcome published through the consumer's own outbox);
//! cancellations (aggregate version 2) applied only after version 1; duplicate deliveries;
//! and the inventory consumer — a separate OS process — killed with SIGKILL between its
//! COMMIT and its ack, then restarted.

pub mod consumer;
pub mod migrate;
pub mod report;

use crate::args::DemoArgs;
use crate::process::{ChildEnv, Worker};
use crate::shop::handlers::RejectionHandler;
use crate::shop::{INVENTORY, NewOrder, ORDERS, ORDERS_TOPICS};
use crate::stack::{Stack, StackSpec, endpoints, shown};
use crate::verdict;
use postroom_core::message::headers::ORIGINAL_ROUTE;
use postroom_core::{
    Envelope, MessageId, OutboxRelay, OutgoingMessage, RelayConfig, RetryLadder, Route, Transport,
};
use postroom_ops::args::PasswordArgs;
use postroom_ops::time::parse_ladder;
use postroom_ops::{OpsError, OpsResult};
use report::DemoReport;
use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, watch};

/// The order whose consumer is killed between COMMIT and ack.
pub(crate) const CRASH_ORDER: &str = "ord-00010";
/// Orders republished with the same id (duplicate deliveries).
pub(crate) const DUPLICATED: [&str; 3] = ["ord-00011", "ord-00012", "ord-00013"];

/// Run the demo.
pub async fn run(args: DemoArgs, passwords: &PasswordArgs) -> OpsResult {
    if args.migrate_to.is_some() {
        return migrate::run(args, passwords).await;
    }
    let ladder = parse_ladder(&args.ladder)?;
    let (database, broker) = endpoints(&args.database, args.broker.as_ref(), passwords)?;
    let started = Instant::now();
    let stack = Stack::start(StackSpec {
        database: database.clone(),
        broker: broker.clone(),
        workload: crate::shop::workload(&args.workload, ladder.clone()),
        lease: consumer::LEASE,
        prefetch: 4,
    })
    .await?;
    eprintln!(
        "postroom demo: database {database}{}, ladder {ladder}, {} orders",
        broker
            .as_ref()
            .map(|b| format!(", broker {b}"))
            .unwrap_or_default(),
        args.orders
    );
    let poison_ids = produce(&stack, args.orders).await?;

    let (stop, stop_rx) = watch::channel(false);
    let relay = OutboxRelay::new(
        stack.outbox.clone(),
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
    let orders_consumer = RejectionHandler::consumer(
        stack.shop.clone(),
        consumer::ORDERS_CONCURRENCY,
        consumer::policy(ladder.clone()),
    );
    let orders_sub = stack.subscribe(ORDERS, ORDERS_TOPICS).await?;
    let orders_task = tokio::spawn({
        let rx = stop_rx.clone();
        async move { orders_consumer.run(orders_sub, rx).await }
    });

    let kills = Arc::new(AtomicU64::new(0));
    let args_child: Vec<OsString> = vec![
        consumer::COMMAND.into(),
        "--ladder".into(),
        args.ladder.clone().into(),
        "--crash-order".into(),
        CRASH_ORDER.into(),
        "--workload".into(),
        args.workload.clone().into(),
    ];
    let worker = Arc::new(Mutex::new(None::<Worker>));
    let sup_task = tokio::spawn(supervise(
        args_child,
        ChildEnv { database, broker },
        worker.clone(),
        kills.clone(),
        stop_rx.clone(),
    ));

    let injected = inject_duplicates(&stack).await?;
    let settled =
        wait_until_settled(&stack, &[], &ladder, &poison_ids, args.timeout_secs, &kills).await;

    let _ = stop.send(true);
    let _ = sup_task.await;
    if let Some(w) = worker.lock().await.take() {
        w.stop(Duration::from_secs(10)).await;
    }
    let _ = relay_task.await;
    let _ = orders_task.await;
    // The service's parking ingest stops here, before the report reads the parking lot.
    stack.close().await;

    let mut report =
        checked_report(&stack, &ladder, &poison_ids, injected, &kills, started).await?;
    if let Err(e) = settled {
        report.failures.push(e);
    }
    stack.close().await;
    report.print();
    verdict::write_json(args.report_json.as_deref(), &report)?;
    eprintln!("look at the parked messages: {}", stack.parking_hint());
    verdict::of(&report.failures)
}

/// The report of a run, read from the databases at its end (the inventory consumer's parked
/// messages, the shop's facts, what became of the order whose consumer was killed), with the
/// duplicates `injected`, the consumer `kills` and the time since `started`; every invariant
/// checked against `ladder` and the `poison_ids`.
pub(crate) async fn checked_report(
    stack: &Stack,
    ladder: &RetryLadder,
    poison_ids: &[String],
    injected: u64,
    kills: &AtomicU64,
    started: Instant,
) -> OpsResult<DemoReport> {
    let parked = stack.parked_by(INVENTORY).await?;
    let ids: Vec<MessageId> = parked.iter().map(|p| p.message_id).collect();
    let mut report = DemoReport::from_facts(&stack.shop.facts(&ids).await?, &parked, ladder);
    report.duplicates_injected = injected;
    report.consumer_kills = kills.load(Ordering::SeqCst);
    report.killed_order = Some(CRASH_ORDER.into());
    report.killed_order_reservations = stack.shop.reservations_of(CRASH_ORDER).await?;
    report.killed_order_redelivered = stack.shop.duplicate_seen_for(CRASH_ORDER).await?;
    report.elapsed_s = started.elapsed().as_secs_f64();
    report.check(ladder, poison_ids);
    Ok(report)
}

/// The orders of the demo and their faults.
pub(crate) fn orders(n: u32) -> Vec<NewOrder> {
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
async fn produce(stack: &Stack, n: u32) -> OpsResult<Vec<String>> {
    create_orders(stack, &orders(n)).await?;
    produce_poison(stack).await
}

/// `orders` through the outbox, one transaction per order.
pub(crate) async fn create_orders(stack: &Stack, orders: &[NewOrder]) -> OpsResult {
    for o in orders {
        stack
            .shop
            .create_orders(std::slice::from_ref(o), "orders")
            .await?;
    }
    Ok(())
}

/// Two poison messages through the outbox: corrupt JSON and an unknown schema version.
pub(crate) async fn produce_poison(stack: &Stack) -> OpsResult<Vec<String>> {
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

/// Send a few already-relayed orders to the inventory consumer again with the same id:
/// duplicate deliveries.
///
/// Each copy is addressed to the consumer alone (the way a redrive is), not republished to
/// its topic: a broker that deduplicates publishes by message id (a JetStream stream and its
/// `Nats-Msg-Id` window) keeps one copy of a topic republish, and the consumer — whose inbox
/// this fault is about — would never see the second.
pub(crate) async fn inject_duplicates(stack: &Stack) -> OpsResult<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let ids: Vec<String> = DUPLICATED.iter().map(|s| (*s).to_string()).collect();
    loop {
        let events = stack.shop.published_events(&ids).await?;
        if events.len() == ids.len() {
            let publisher = stack.publisher();
            for m in &events {
                publisher.publish(&duplicate_of(m)).await?;
            }
            return Ok(events.len() as u64);
        }
        if Instant::now() > deadline {
            return Err(OpsError::failed(
                "the relay did not publish the first orders within 30 s",
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A second copy of `m` for the inventory consumer alone, with the same id and its topic kept
/// as the original route.
fn duplicate_of(m: &OutgoingMessage) -> OutgoingMessage {
    let mut copy = m.clone();
    copy.headers
        .insert(ORIGINAL_ROUTE.into(), m.route.as_str().to_string());
    copy.route = Route::Consumer(INVENTORY.into());
    copy
}

/// Messages of the shop's consumers not yet settled on `transport` (`u64::MAX` when the
/// figure cannot be read now).
pub(crate) async fn in_flight_on(transport: &dyn Transport) -> u64 {
    let mut n = 0u64;
    for c in [INVENTORY, ORDERS] {
        match transport.backlog(c).await {
            Ok(b) => n = n.saturating_add(b.ready + b.unacked + b.delayed),
            Err(_) => return u64::MAX,
        }
    }
    n
}

/// Wait until every message is resolved and nothing is in flight (on the stack's transport
/// and on each of `also`), printing progress.
pub(crate) async fn wait_until_settled(
    stack: &Stack,
    also: &[Arc<dyn Transport>],
    ladder: &RetryLadder,
    poison_ids: &[String],
    timeout_secs: u64,
    kills: &AtomicU64,
) -> Result<(), String> {
    let started = Instant::now();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    let hold = stack.settle_hold();
    let mut quiet_since: Option<Instant> = None;
    loop {
        let parked = stack
            .parked_by(INVENTORY)
            .await
            .map_err(|e| e.to_string())?;
        let ids: Vec<MessageId> = parked.iter().map(|p| p.message_id).collect();
        let facts = stack.shop.facts(&ids).await.map_err(|e| e.to_string())?;
        let r = DemoReport::from_facts(&facts, &parked, ladder);
        let mut in_flight = stack.in_flight().await;
        for t in also {
            in_flight = in_flight.saturating_add(in_flight_on(t.as_ref()).await);
        }
        let pending = stack.outbox.pending().await.map_err(|e| e.to_string())?;
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
                shown(in_flight),
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
pub(crate) async fn supervise(
    args: Vec<OsString>,
    env: ChildEnv,
    slot: Arc<Mutex<Option<Worker>>>,
    kills: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let mut w = match Worker::spawn(args.clone(), &env) {
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
                        // An empty slot: whoever took the process out killed it on purpose.
                        if slot.lock().await.take().is_some() {
                            eprintln!("         consumer process {pid} exited unexpectedly; restarting it");
                        } else {
                            eprintln!("         consumer process {pid} restarted after its SIGKILL");
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        break;
                    }
                },
                _ = stop.changed() => return,
            }
        }
    }
}
