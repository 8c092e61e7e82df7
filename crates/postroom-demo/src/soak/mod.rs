//! `postroom soak`: the whole pipeline while processes die at random: at-least-once delivery
//! with exactly one effect per message, shown at scale.
//!
//! A producer writes orders through the outbox; relays and consumers run as separate OS
//! processes; every `--kill-every` seconds a random relay or consumer is killed with SIGKILL
//! and restarted. Transient failures, poison messages, out-of-stock outcomes and
//! cancellations (aggregate version 2) are mixed in. At the end the run waits for
//! quiescence and checks, from the databases and the parking store, that every message has
//! exactly one effect or one parking record, that no effect was applied twice, and that the
//! version guard applied each order's events in order.

pub mod report;
pub mod worker;

use crate::args::SoakArgs;
use crate::process::{ChildEnv, Worker};
use crate::shop::{INVENTORY, ShopFacts};
use crate::stack::{Stack, StackSpec, endpoints, shown};
use crate::{faults, verdict};
use postroom_core::MessageId;
use postroom_ops::args::PasswordArgs;
use postroom_ops::time::parse_ladder;
use postroom_ops::{OpsError, OpsResult};
use rand::Rng;
pub use report::SoakReport;
use std::ffi::OsString;
use std::time::{Duration, Instant};

struct Pool {
    relays: Vec<Worker>,
    consumers: Vec<Worker>,
}

fn worker_args(args: &SoakArgs, role: &str, id: u32) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![worker::COMMAND.into(), "--role".into(), role.into()];
    v.extend([
        "--id".into(),
        id.to_string().into(),
        "--ladder".into(),
        args.ladder.clone().into(),
        "--workload".into(),
        args.workload.clone().into(),
    ]);
    v.extend(["--messages".into(), args.messages.to_string().into()]);
    v.extend(["--rate".into(), args.rate.to_string().into()]);
    v.extend(["--batch-size".into(), args.batch_size.to_string().into()]);
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

fn spawn(args: Vec<OsString>, env: &ChildEnv) -> OpsResult<Worker> {
    Worker::spawn(args, env)
        .map_err(|e| OpsError::failed(format!("cannot start a soak process: {e}")))
}

fn respawn(w: &Worker) -> OpsResult<Worker> {
    w.respawn()
        .map_err(|e| OpsError::failed(format!("cannot restart a soak process: {e}")))
}

/// Run the soak.
pub async fn run(args: SoakArgs, passwords: &PasswordArgs) -> OpsResult {
    let ladder = parse_ladder(&args.ladder)?;
    let (database, broker) = endpoints(&args.database, args.broker.as_ref(), passwords)?;
    if args.restart_broker && broker.is_none() {
        return Err(OpsError::usage(
            "--restart-broker needs --broker (the embedded queue has no broker to restart)",
        ));
    }
    if args.restart_command.is_some() && !args.restart_broker {
        return Err(OpsError::usage(
            "--restart-command is how --restart-broker restarts the broker: give both",
        ));
    }
    let stack = Stack::start(StackSpec {
        database: database.clone(),
        broker: broker.clone(),
        workload: crate::shop::workload(&args.workload, ladder),
        lease: worker::LEASE,
        prefetch: 8,
    })
    .await?;
    let transport = stack.pipeline.transport().name();
    let restart = args
        .restart_broker
        .then(|| faults::Restart::of(transport, args.restart_command.as_deref()))
        .transpose()?;
    eprintln!(
        "postroom soak: {} messages, {} relay(s), {} consumer(s){}, a SIGKILL every {} s, database {database}{}",
        args.messages,
        args.relays,
        args.consumers,
        match args.batch_size {
            0 => String::new(),
            n => format!(" (batches of up to {n})"),
        },
        args.kill_every,
        broker
            .as_ref()
            .map(|b| format!(", broker {b}"))
            .unwrap_or_default(),
    );
    let env = ChildEnv { database, broker };
    let hold = stack.settle_hold();
    let mut quiet_since: Option<Instant> = None;
    let started = Instant::now();
    let mut producer = spawn(worker_args(&args, "producer", 0), &env)?;
    let mut pool = Pool {
        relays: (0..args.relays)
            .map(|i| spawn(worker_args(&args, "relay", i), &env))
            .collect::<OpsResult<_>>()?,
        consumers: (0..args.consumers)
            .map(|i| spawn(worker_args(&args, "consumer", i), &env))
            .collect::<OpsResult<_>>()?,
    };
    let mut report = SoakReport::default();
    let mut next_kill = Instant::now() + Duration::from_secs_f64(args.kill_every.max(0.1));
    let mut last_print = Instant::now();
    let mut producer_done = false;
    let outcome = loop {
        // Kills go on past the drain until both kinds were killed.
        if args.kill_every > 0.0
            && Instant::now() >= next_kill
            && (!both_kinds_killed(&args, &report) || !producer_done_and_drained(&stack).await)
        {
            next_kill = Instant::now() + Duration::from_secs_f64(args.kill_every);
            kill_one(&mut pool, &mut report).await?;
        }
        for w in pool.relays.iter_mut().chain(pool.consumers.iter_mut()) {
            if w.exited() {
                *w = respawn(w)?;
            }
        }
        if !producer_done && producer.exited() {
            producer_done = true;
        }
        if let Some(restart) = &restart
            && report.broker_restarts == 0
            && producer_done
        {
            restart.run().await?;
            report.broker_restarts += 1;
        }
        // Cheap figures every pass; the full facts (which read every message) only once the
        // pipeline looks drained, so that checking never slows the run it checks.
        let in_flight = stack.in_flight().await;
        let pending = stack.outbox.pending().await?;
        let (orders, produced) = stack.shop.produced().await?;
        let applied = stack.shop.effects_count().await?;
        if last_print.elapsed() >= Duration::from_secs(2) {
            last_print = Instant::now();
            eprintln!(
                "[{:>6.1}s] produced {produced}/{} | effects {applied} | kills {} | outbox {pending} | in flight {}",
                started.elapsed().as_secs_f64(),
                args.messages,
                report.kills,
                shown(in_flight),
            );
        }
        let drained = producer_done
            && produced >= args.messages
            && in_flight == 0
            && pending == 0
            && both_kinds_killed(&args, &report);
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
    // The service's parking ingest stops here, before the parking lot is read.
    stack.close().await;
    let timed_out = outcome.is_err();
    let (facts, parked) = match outcome {
        Ok(x) | Err(x) => x,
    };
    let poison = poison_ids(&stack).await?;
    report.messages = facts.messages;
    report.lost = facts.lost_ids.len() as u64;
    report.duplicate_effects = facts.duplicate_effects;
    report.order_violations = facts.order_violations;
    report.reordered_deliveries = facts.reordered_deliveries;
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
    report.batch_size = args.batch_size;
    report.largest_batch = facts.largest_batch;
    report.throughput_msgs_per_s = facts.messages as f64 / report.elapsed_s.max(0.001);
    let mut f = Vec::new();
    if timed_out {
        f.push(format!("did not settle within {} s", args.timeout_secs));
    }
    f.extend(fact_failures(&facts));
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
    if args.kill_every > 0.0 && args.relays > 0 && report.relay_kills == 0 {
        f.push("no relay was killed".into());
    }
    if args.kill_every > 0.0 && args.consumers > 0 && report.consumer_kills == 0 {
        f.push("no consumer was killed".into());
    }
    report.failures = f;
    stack.close().await;
    report.print();
    verdict::write_json(args.json.as_deref(), &report)?;
    verdict::of(&report.failures)
}

/// The checks read from the databases at the end of a run: every message has an effect or a
/// parking record (nothing lost), no effect was applied twice, and each order's events were
/// applied in aggregate order. One line per check that failed.
#[must_use]
pub fn fact_failures(facts: &ShopFacts) -> Vec<String> {
    let mut f = Vec::new();
    if !facts.lost_ids.is_empty() {
        f.push(format!(
            "{} message(s) lost, e.g. {:?}",
            facts.lost_ids.len(),
            facts.lost_ids.iter().take(5).collect::<Vec<_>>()
        ));
    }
    if facts.duplicate_effects > 0 {
        f.push(format!(
            "{} effect(s) applied twice",
            facts.duplicate_effects
        ));
    }
    if facts.order_violations > 0 {
        f.push(format!(
            "{} effect(s) out of aggregate order",
            facts.order_violations
        ));
    }
    f
}

/// With kills on: at least one relay and one consumer (of those there are) was killed.
fn both_kinds_killed(args: &SoakArgs, report: &SoakReport) -> bool {
    args.kill_every <= 0.0
        || ((args.relays == 0 || report.relay_kills > 0)
            && (args.consumers == 0 || report.consumer_kills > 0))
}

async fn producer_done_and_drained(stack: &Stack) -> bool {
    stack.outbox.pending().await.unwrap_or(1) == 0 && stack.in_flight().await == 0
}

/// Kill one relay or consumer: the kind killed less often so far (a coin decides a tie), so
/// every run with two kills or more has killed both kinds; a random process of that kind.
async fn kill_one(pool: &mut Pool, report: &mut SoakReport) -> OpsResult {
    let is_relay = match (pool.relays.is_empty(), pool.consumers.is_empty()) {
        (true, true) => return Ok(()),
        (false, true) => true,
        (true, false) => false,
        (false, false) => match report.relay_kills.cmp(&report.consumer_kills) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => rand::rng().random_bool(0.5),
        },
    };
    let kind = if is_relay {
        &mut pool.relays
    } else {
        &mut pool.consumers
    };
    let pick = rand::rng().random_range(0..kind.len());
    let w = &mut kind[pick];
    w.kill().await;
    *w = respawn(w)?;
    report.kills += 1;
    if is_relay {
        report.relay_kills += 1;
    } else {
        report.consumer_kills += 1;
    }
    Ok(())
}

async fn facts(stack: &Stack) -> OpsResult<(ShopFacts, Vec<postroom_core::ParkedMessage>)> {
    let parked = stack.parked_by(INVENTORY).await?;
    let ids: Vec<MessageId> = parked.iter().map(|p| p.message_id).collect();
    Ok((stack.shop.facts(&ids).await?, parked))
}

async fn oos_orders(stack: &Stack) -> OpsResult<u64> {
    Ok(stack.shop.count_orders_with_sku("NONE").await?)
}

async fn poison_ids(stack: &Stack) -> OpsResult<Vec<String>> {
    Ok(stack.shop.poison_ids().await?)
}
