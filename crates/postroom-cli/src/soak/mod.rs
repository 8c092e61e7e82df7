//! `postroom soak`: the whole pipeline while processes die at random (R19 at scale).
//!
//! A producer writes orders through the outbox; relays and consumers run as separate OS
//! processes; every `--kill-every` seconds a random relay or consumer is killed with SIGKILL
//! and restarted. Transient failures, poison messages, out-of-stock outcomes and
//! cancellations (aggregate version 2) are mixed in. At the end the run waits for
//! quiescence and checks, from the databases and the parking store, that every message has
//! exactly one effect or one parking record, that no effect was applied twice, and that the
//! version guard applied each order's events in order.

pub mod worker;

/// Queue and exchange prefix of the soak on RabbitMQ.
pub const WORKLOAD: &str = "postroom-soak";

use crate::cli::SoakArgs;
use crate::error::{CliError, CliErrorKind, CliResult};
use crate::shop::{INVENTORY, INVENTORY_TOPICS, ORDERS, ORDERS_TOPICS, ShopFacts};
use crate::stack::{DatabaseUrl, Stack};
use crate::worker::Worker;
use postroom_core::{MessageId, ParkingFilter};
use rand::Rng;
use serde::Serialize;
use std::ffi::OsString;
use std::time::{Duration, Instant};

/// The soak's summary.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SoakReport {
    /// Messages produced (order events and poison).
    pub messages: u64,
    /// Orders produced.
    pub orders: u64,
    /// SIGKILLs of relays and consumers.
    pub kills: u64,
    /// Relay kills.
    pub relay_kills: u64,
    /// Consumer kills.
    pub consumer_kills: u64,
    /// Broker restarts.
    pub broker_restarts: u64,
    /// Messages with no effect and no parking record.
    pub lost: u64,
    /// Effects applied more than once.
    pub duplicate_effects: u64,
    /// Effects applied out of aggregate order.
    pub order_violations: u64,
    /// Parked messages.
    pub parked: u64,
    /// Parked messages that were not poison (should be none).
    pub parked_unexpected: u64,
    /// Orders reserved.
    pub reserved: u64,
    /// Orders rejected and applied back by the orders service.
    pub rejected: u64,
    /// Out-of-stock orders produced.
    pub out_of_stock_orders: u64,
    /// Cancellations applied.
    pub cancelled: u64,
    /// Duplicate deliveries absorbed by the inboxes.
    pub duplicates_absorbed: u64,
    /// Handler calls that were retries.
    pub retried_calls: u64,
    /// Stock matches reservations.
    pub stock_consistent: bool,
    /// Seconds from start to quiescence.
    pub elapsed_s: f64,
    /// Messages per second over the run.
    pub throughput_msgs_per_s: f64,
    /// Invariants that failed.
    pub failures: Vec<String>,
}

struct Pool {
    relays: Vec<Worker>,
    consumers: Vec<Worker>,
}

fn worker_args(args: &SoakArgs, database: &DatabaseUrl, role: &str, id: u32) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![
        "soak-worker".into(),
        "--role".into(),
        role.into(),
        "--database".into(),
        database.to_arg().into(),
    ];
    v.extend([
        "--id".into(),
        id.to_string().into(),
        "--ladder".into(),
        args.ladder.clone().into(),
    ]);
    v.extend(["--messages".into(), args.messages.to_string().into()]);
    if let Some(b) = &args.broker {
        v.extend(["--broker".into(), b.into()]);
    }
    for (flag, val) in [
        ("--transient-share", args.transient_share),
        ("--poison-share", args.poison_share),
        ("--out-of-stock-share", args.out_of_stock_share),
        ("--cancel-share", args.cancel_share),
    ] {
        v.push(flag.into());
        v.push(val.to_string().into());
    }
    v
}

fn spawn(args: Vec<OsString>) -> CliResult<Worker> {
    Worker::spawn(args).map_err(|e| CliError::failed(format!("cannot start a soak process: {e}")))
}

/// Run the soak.
pub async fn run(args: SoakArgs) -> CliResult {
    for (name, v) in [
        ("transient-share", args.transient_share),
        ("poison-share", args.poison_share),
        ("out-of-stock-share", args.out_of_stock_share),
        ("cancel-share", args.cancel_share),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return Err(CliError::usage(format!(
                "--{name} must be between 0 and 1, got {v}"
            )));
        }
    }
    let ladder: postroom_core::RetryLadder = args.ladder.parse().map_err(CliError::usage)?;
    if args.restart_broker && args.broker.is_none() {
        return Err(CliError::usage(
            "--restart-broker needs --broker (the embedded queue has no broker to restart)",
        ));
    }
    let database = DatabaseUrl::parse(&args.database)?;
    if let DatabaseUrl::Sqlite(path) = &database {
        crate::demo::prepare_file(path).await?;
    }
    let workload = crate::shop::workload(WORKLOAD, ladder);
    let stack = Stack::open(
        &database,
        args.broker.as_deref().map(|b| (b, &workload, true)),
        worker::LEASE,
        8,
    )
    .await?;
    stack.shop.reset().await?;
    stack.bind(INVENTORY, INVENTORY_TOPICS).await?;
    stack.bind(ORDERS, ORDERS_TOPICS).await?;
    eprintln!(
        "postroom soak: {} messages, {} relay(s), {} consumer(s), a SIGKILL every {} s, database {}",
        args.messages,
        args.relays,
        args.consumers,
        args.kill_every,
        database.to_arg()
    );
    let (stop_ingest, stop_rx) = tokio::sync::watch::channel(false);
    let ingest_tasks = match &stack.transport {
        crate::stack::Transport::Rabbit(r) => {
            r.spawn_parking_ingest(stack.shop.parking(), &stop_rx)
        }
        _ => Vec::new(),
    };
    let hold = if stack.lagging_figures() {
        Duration::from_secs(7)
    } else {
        Duration::ZERO
    };
    let mut quiet_since: Option<Instant> = None;
    let started = Instant::now();
    let mut producer = spawn(worker_args(&args, &database, "producer", 0))?;
    let mut pool = Pool {
        relays: (0..args.relays)
            .map(|i| spawn(worker_args(&args, &database, "relay", i)))
            .collect::<CliResult<_>>()?,
        consumers: (0..args.consumers)
            .map(|i| spawn(worker_args(&args, &database, "consumer", i)))
            .collect::<CliResult<_>>()?,
    };
    let mut report = SoakReport::default();
    let mut next_kill = Instant::now() + Duration::from_secs_f64(args.kill_every.max(0.1));
    let mut last_print = Instant::now();
    let mut producer_done = false;
    let outcome = loop {
        if args.kill_every > 0.0
            && Instant::now() >= next_kill
            && !producer_done_and_drained(&stack).await
        {
            next_kill = Instant::now() + Duration::from_secs_f64(args.kill_every);
            kill_one(&mut pool, &mut report).await?;
        }
        for w in pool.relays.iter_mut().chain(pool.consumers.iter_mut()) {
            if w.exited() {
                *w = w
                    .respawn()
                    .map_err(|e| CliError::failed(format!("cannot restart a soak process: {e}")))?;
            }
        }
        if !producer_done && producer.exited() {
            producer_done = true;
        }
        if args.restart_broker && report.broker_restarts == 0 && producer_done {
            restart_broker().await?;
            report.broker_restarts += 1;
        }
        // Cheap figures every pass; the full facts (which read every message) only once the
        // pipeline looks drained, so that checking never slows the run it checks.
        let in_flight = stack.in_flight().await.unwrap_or(u64::MAX);
        let pending = stack.shop.outbox().pending().await?;
        let (orders, produced) = stack.shop.produced().await?;
        let applied = stack.shop.effects_count().await?;
        if last_print.elapsed() >= Duration::from_secs(2) {
            last_print = Instant::now();
            eprintln!(
                "[{:>6.1}s] produced {produced}/{} | effects {applied} | kills {} | outbox {pending} | in flight {}",
                started.elapsed().as_secs_f64(),
                args.messages,
                report.kills,
                if in_flight == u64::MAX {
                    "?".to_string()
                } else {
                    in_flight.to_string()
                },
            );
        }
        let drained = producer_done && produced >= args.messages && in_flight == 0 && pending == 0;
        let timed_out = started.elapsed() > Duration::from_secs(args.timeout_secs);
        if drained || timed_out {
            let (facts, parked) = facts(&stack).await?;
            let expected_rejections = oos_orders(&stack).await?;
            if timed_out {
                break Err((facts, parked));
            }
            if facts.lost_ids.is_empty() && facts.rejected == expected_rejections {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= hold {
                    report.orders = orders;
                    break Ok((facts, parked));
                }
            } else {
                quiet_since = None;
            }
        } else {
            quiet_since = None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    report.elapsed_s = started.elapsed().as_secs_f64();
    for w in pool
        .relays
        .into_iter()
        .chain(pool.consumers)
        .chain(std::iter::once(producer))
    {
        w.stop(Duration::from_secs(10)).await;
    }
    let _ = stop_ingest.send(true);
    for t in ingest_tasks {
        let _ = t.await;
    }
    let timed_out = outcome.is_err();
    let (facts, parked) = match outcome {
        Ok(x) | Err(x) => x,
    };
    let poison = poison_ids(&stack).await?;
    report.messages = facts.messages;
    report.lost = facts.lost_ids.len() as u64;
    report.duplicate_effects = facts.duplicate_effects;
    report.order_violations = facts.order_violations;
    report.parked = parked.len() as u64;
    report.parked_unexpected = parked
        .iter()
        .filter(|p| !poison.contains(&p.message_id.to_string()))
        .count() as u64;
    report.reserved = facts.reserved;
    report.rejected = facts.rejected;
    report.out_of_stock_orders = oos_orders(&stack).await?;
    report.cancelled = facts.cancelled;
    report.duplicates_absorbed = facts.duplicates_absorbed;
    report.retried_calls = facts.calls_by_attempt.values().sum();
    report.stock_consistent = facts.stock_consistent;
    report.throughput_msgs_per_s = facts.messages as f64 / report.elapsed_s.max(0.001);
    let mut f = Vec::new();
    if timed_out {
        f.push(format!("did not settle within {} s", args.timeout_secs));
    }
    if report.lost > 0 {
        f.push(format!(
            "{} message(s) lost, e.g. {:?}",
            report.lost,
            facts.lost_ids.iter().take(5).collect::<Vec<_>>()
        ));
    }
    if report.duplicate_effects > 0 {
        f.push(format!(
            "{} effect(s) applied twice",
            report.duplicate_effects
        ));
    }
    if report.order_violations > 0 {
        f.push(format!(
            "{} effect(s) out of aggregate order",
            report.order_violations
        ));
    }
    if report.rejected != report.out_of_stock_orders {
        f.push(format!(
            "{} out-of-stock orders but {} rejections applied",
            report.out_of_stock_orders, report.rejected
        ));
    }
    if !report.stock_consistent {
        f.push("stock does not match reservations".into());
    }
    if poison
        .iter()
        .any(|id| !parked.iter().any(|p| &p.message_id.to_string() == id))
    {
        f.push("a poison message was not parked".into());
    }
    if args.kill_every > 0.0 && report.kills == 0 {
        f.push("no process was killed".into());
    }
    report.failures = f;
    print(&report);
    if let Some(p) = &args.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(&report).expect("report serialises"),
        )
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", p.display())))?;
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

/// Stop and start the RabbitMQ application (the node keeps running, every connection drops).
async fn restart_broker() -> CliResult {
    eprintln!("         restarting the broker: rabbitmqctl stop_app / start_app");
    for cmd in ["stop_app", "start_app"] {
        let status = tokio::process::Command::new("rabbitmqctl")
            .arg("-q")
            .arg(cmd)
            .status()
            .await
            .map_err(|e| CliError::failed(format!("cannot run rabbitmqctl {cmd}: {e}")))?;
        if !status.success() {
            return Err(CliError::failed(format!(
                "rabbitmqctl {cmd} failed: {status}"
            )));
        }
        if cmd == "stop_app" {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    Ok(())
}

async fn producer_done_and_drained(stack: &Stack) -> bool {
    stack.shop.outbox().pending().await.unwrap_or(1) == 0
        && stack.in_flight().await.unwrap_or(1) == 0
}

async fn kill_one(pool: &mut Pool, report: &mut SoakReport) -> CliResult {
    let n = pool.relays.len() + pool.consumers.len();
    let pick = rand::rng().random_range(0..n);
    let (w, is_relay) = if pick < pool.relays.len() {
        (&mut pool.relays[pick], true)
    } else {
        (&mut pool.consumers[pick - pool.relays.len()], false)
    };
    w.kill().await;
    *w = w
        .respawn()
        .map_err(|e| CliError::failed(format!("cannot restart a soak process: {e}")))?;
    report.kills += 1;
    if is_relay {
        report.relay_kills += 1;
    } else {
        report.consumer_kills += 1;
    }
    Ok(())
}

async fn facts(stack: &Stack) -> CliResult<(ShopFacts, Vec<postroom_core::ParkedMessage>)> {
    let filter = ParkingFilter {
        consumer: Some(INVENTORY.into()),
        include_redriven: true,
        ..ParkingFilter::default()
    };
    let parked = stack.shop.parking().search(&filter, 1_000_000).await?;
    let ids: Vec<MessageId> = parked.iter().map(|p| p.message_id).collect();
    Ok((stack.shop.facts(&ids).await?, parked))
}

async fn oos_orders(stack: &Stack) -> CliResult<u64> {
    Ok(stack.shop.count_orders_with_sku("NONE").await?)
}

async fn poison_ids(stack: &Stack) -> CliResult<Vec<String>> {
    Ok(stack.shop.poison_ids().await?)
}

fn print(r: &SoakReport) {
    println!();
    println!(
        "postroom soak ({:.1} s, {:.0} messages/s)",
        r.elapsed_s, r.throughput_msgs_per_s
    );
    println!(
        "  messages .............. {} ({} orders)",
        r.messages, r.orders
    );
    println!(
        "  kills (SIGKILL) ....... {} ({} relay, {} consumer)",
        r.kills, r.relay_kills, r.consumer_kills
    );
    println!("  reserved .............. {}", r.reserved);
    println!(
        "  rejected .............. {} of {} out-of-stock orders",
        r.rejected, r.out_of_stock_orders
    );
    println!("  cancelled ............. {}", r.cancelled);
    println!(
        "  parked ................ {} ({} not poison)",
        r.parked, r.parked_unexpected
    );
    println!("  duplicates absorbed ... {}", r.duplicates_absorbed);
    println!("  retried handler calls . {}", r.retried_calls);
    println!("  lost .................. {}", r.lost);
    println!("  duplicate effects ..... {}", r.duplicate_effects);
    println!("  out-of-order effects .. {}", r.order_violations);
    println!("  stock consistent ...... {}", r.stock_consistent);
    if r.failures.is_empty() {
        println!("all invariants hold");
    } else {
        for f in &r.failures {
            println!("INVARIANT FAILED: {f}");
        }
    }
}
