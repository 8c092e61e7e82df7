//! `postroom demo --broker A --migrate-to B`: the orders → inventory run while the feed moves
//! from broker A to broker B, step by step as the runbook in docs/migration-nats-to-kafka.md does it:
//!
//! 1. on A alone: the first orders and every fault of the plain demo (retries, poison,
//!    out-of-stock, cancellations, duplicates, the consumer killed between COMMIT and ack);
//! 2. dual publishing: the relay is restarted publishing each row to A and B with the same
//!    id (marked only when both confirmed); consumers on B start beside those on A; more
//!    orders; one inventory consumer of each feed is SIGKILLed while both run;
//! 3. once A's backlog is drained, the consumers on A stop;
//! 4. the relay is restarted publishing to B alone; the last orders flow on B.
//!
//! The inventory consumers of both feeds write into the same inbox table: each message's
//! effect is applied once, and its second copy (from the other broker) is absorbed.

use super::report::MigrationReport;
use super::{
    CRASH_ORDER, DUPLICATED, checked_report, consumer, create_orders, in_flight_on,
    inject_duplicates, orders, produce_poison, supervise, wait_until_settled,
};
use crate::args::DemoArgs;
use crate::process::{ChildEnv, Worker};
use crate::shop::handlers::RejectionHandler;
use crate::shop::{INVENTORY, INVENTORY_TOPICS, ORDERS, ORDERS_TOPICS};
use crate::stack::{Stack, StackSpec, endpoints};
use crate::verdict;
use postroom_core::{OutboxRelay, Publisher, RelayConfig, Subscription, Transport};
use postroom_ops::args::PasswordArgs;
use postroom_ops::time::parse_ladder;
use postroom_ops::{Endpoint, OpsError, OpsResult, Workload};
use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

/// Longest wait for one step of the move.
const STEP_LIMIT: Duration = Duration::from_secs(90);

/// Deliveries a demo subscription holds.
const PREFETCH: usize = 4;

/// Run the demo with the move.
pub async fn run(args: DemoArgs, passwords: &PasswordArgs) -> OpsResult {
    let ladder = parse_ladder(&args.ladder)?;
    let (database, broker) = endpoints(&args.database, args.broker.as_ref(), passwords)?;
    let Some(from) = broker else {
        return Err(OpsError::usage(
            "--migrate-to needs --broker: the broker to move from",
        ));
    };
    let to = Endpoint::broker(args.migrate_to.as_ref().map_or("", |u| u.0.as_str()))?;
    let started = Instant::now();
    let workload = crate::shop::workload(&args.workload, ladder.clone());
    let stack = Stack::start(StackSpec {
        database: database.clone(),
        broker: Some(from.clone()),
        workload: workload.clone(),
        lease: consumer::LEASE,
        prefetch: PREFETCH,
    })
    .await?;
    let old: Arc<dyn Transport> = stack.pipeline.transport().clone();
    let target = open_target(&stack, &to, workload, consumer::LEASE).await?;
    let new: Arc<dyn Transport> = target.transport().clone();
    let mut migration = MigrationReport {
        from: old.name().into(),
        to: new.name().into(),
        ..MigrationReport::default()
    };
    if migration.from == migration.to {
        migration.to = format!("{} (second)", migration.to);
    }
    let step = |what: String, migration: &mut MigrationReport| {
        eprintln!("[{:>5.1}s] step: {what}", started.elapsed().as_secs_f64());
        migration
            .steps
            .push((what, started.elapsed().as_secs_f64()));
    };
    eprintln!(
        "postroom demo: database {database}, moving from {from} to {to}, ladder {ladder}, {} orders",
        args.orders
    );

    let all = orders(args.orders);
    let n = all.len();
    let (first, rest) = all.split_at(n / 2);
    let (second, third) = rest.split_at(rest.len() * 2 / 3);

    let kills = Arc::new(AtomicU64::new(0));

    // Step 1: everything on the old broker.
    step(
        format!("relay publishes to {} alone", migration.from),
        &mut migration,
    );
    create_orders(&stack, first).await?;
    let poison_ids = produce_poison(&stack).await?;
    let mut relay = RelayTask::start(&stack, "demo-relay-1", old.publisher());
    let old_feed = Feed::start(
        &stack,
        &args,
        &ladder,
        old.as_ref(),
        &from,
        Some(CRASH_ORDER),
        kills.clone(),
    )
    .await?;
    let injected = inject_duplicates(&stack).await?;
    // The plain demo's kill and duplicates are over before the move starts: what the inbox
    // absorbs from here on is the overlap's.
    wait_for(
        "the consumer to be killed between COMMIT and ack and the duplicates absorbed",
        async || {
            kills.load(Ordering::SeqCst) > 0
                && stack.outbox.pending().await.is_ok_and(|p| p == 0)
                && stack
                    .shop
                    .facts(&[])
                    .await
                    .is_ok_and(|f| f.duplicates_absorbed >= injected)
        },
    )
    .await?;

    // Step 2: dual publishing, and the new feed beside the old one.
    relay.stop().await;
    step(
        format!("relay publishes to {} + {}", migration.from, migration.to),
        &mut migration,
    );
    let absorbed_before = stack.shop.facts(&[]).await?.duplicates_absorbed;
    let both = postroom_ops::relay::publisher_to(&old, std::slice::from_ref(&new))?;
    relay = RelayTask::start(&stack, "demo-relay-2", both);
    let new_feed = Feed::start(
        &stack,
        &args,
        &ladder,
        new.as_ref(),
        &to,
        None,
        Arc::new(AtomicU64::new(0)),
    )
    .await?;
    step(
        format!(
            "{} feed started beside the {} feed",
            migration.to, migration.from
        ),
        &mut migration,
    );
    let reserved_before = stack.shop.facts(&[]).await?.reserved;
    let producing = {
        let shop = stack.shop.clone();
        let orders = second.to_vec();
        tokio::spawn(async move {
            for o in orders {
                shop.create_orders(std::slice::from_ref(&o), "orders")
                    .await?;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            Ok::<_, postroom_core::Error>(())
        })
    };
    // One SIGKILL on each feed while orders flow through both.
    for (feed, name, after) in [
        (&old_feed, migration.from.clone(), 1u64),
        (&new_feed, migration.to.clone(), 3u64),
    ] {
        wait_for("orders to flow through both feeds", async || {
            stack
                .shop
                .facts(&[])
                .await
                .is_ok_and(|f| f.reserved >= reserved_before + after)
        })
        .await?;
        if feed.kill(&name).await {
            *migration.overlap_kills.entry(name.clone()).or_default() += 1;
        }
    }
    producing
        .await
        .map_err(|e| OpsError::failed(format!("the order producer failed: {e}")))??;

    // Step 3: the old feed drained, then stopped.
    let hold = stack.settle_hold();
    let mut quiet_since: Option<Instant> = None;
    wait_for("the old broker's backlog to drain", async || {
        let quiet = in_flight_on(old.as_ref()).await == 0
            && stack.outbox.pending().await.is_ok_and(|p| p == 0);
        if !quiet {
            quiet_since = None;
            return false;
        }
        quiet_since.get_or_insert_with(Instant::now).elapsed() >= hold
    })
    .await?;
    step(format!("{} feed stopped", migration.from), &mut migration);
    old_feed.stop().await;

    // Step 4: publishing to the old broker stops.
    relay.stop().await;
    step(
        format!("relay publishes to {} alone", migration.to),
        &mut migration,
    );
    relay = RelayTask::start(&stack, "demo-relay-3", new.publisher());
    create_orders(&stack, third).await?;

    let settled = wait_until_settled(
        &stack,
        std::slice::from_ref(&new),
        &ladder,
        &poison_ids,
        args.timeout_secs,
        &kills,
    )
    .await;

    new_feed.stop().await;
    relay.stop().await;
    // Both services' parking ingests stop here, before the report reads the parking lot.
    target.shutdown().await;
    stack.close().await;

    let mut report =
        checked_report(&stack, &ladder, &poison_ids, injected, &kills, started).await?;
    migration.overlap_duplicates_absorbed =
        report.duplicates_absorbed.saturating_sub(absorbed_before);
    for feed in [&migration.from, &migration.to] {
        if migration.overlap_kills.get(feed).copied().unwrap_or(0) == 0 {
            report
                .failures
                .push(format!("no {feed} consumer was killed during the overlap"));
        }
    }
    if migration.overlap_duplicates_absorbed == 0 {
        report
            .failures
            .push("no duplicate was absorbed during the overlap".into());
    }
    if report.duplicates_absorbed < DUPLICATED.len() as u64 {
        report
            .failures
            .push("the injected duplicates were not absorbed".into());
    }
    if let Err(e) = settled {
        report.failures.push(e);
    }
    report.migration = Some(migration);
    report.print();
    verdict::write_json(args.report_json.as_deref(), &report)?;
    eprintln!("look at the parked messages: {}", stack.parking_hint());
    verdict::of(&report.failures)
}

/// Open the broker to move to, for the same workload, from an empty state, with the shop's
/// consumers bound before anything is published to it: a second service over the same store,
/// moving that broker's dead-lettered copies into the same parking lot while it runs.
async fn open_target(
    stack: &Stack,
    endpoint: &Endpoint,
    workload: Workload,
    lease: Duration,
) -> OpsResult<postroom::Running> {
    let mut b = postroom::Service::builder()
        .store(postroom_ops::store_of(&stack.pipeline)?.clone())
        .broker_at(endpoint.clone())
        .prefix(&workload.prefix)
        .redelivery_after(lease)
        .declare_topology(false)
        .fresh();
    if let Some(ladder) = &workload.ladder {
        b = b.retry(postroom_core::RetryPolicy::default().ladder(ladder.clone()));
    }
    let mut service = b.open().await?;
    for c in &workload.consumers {
        let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
        service = service.bind_for(&c.name, &routes);
    }
    let running = service.ingest_parked().start().await?;
    for (consumer, topics) in [(INVENTORY, INVENTORY_TOPICS), (ORDERS, ORDERS_TOPICS)] {
        running
            .transport()
            .bind(&Subscription::new(consumer, topics).prefetch(PREFETCH))
            .await?;
    }
    Ok(running)
}

/// The orders service's consumer of rejections on `transport`, until `stop`.
async fn spawn_orders_consumer(
    stack: &Stack,
    transport: &dyn Transport,
    ladder: &postroom_core::RetryLadder,
    stop: &watch::Receiver<bool>,
) -> OpsResult<JoinHandle<()>> {
    let consumer = RejectionHandler::consumer(
        stack.shop.clone(),
        consumer::ORDERS_CONCURRENCY,
        consumer::policy(ladder.clone()),
    );
    let sub = transport
        .subscribe(&Subscription::new(ORDERS, ORDERS_TOPICS).prefetch(PREFETCH))
        .await?;
    let rx = stop.clone();
    Ok(tokio::spawn(async move { consumer.run(sub, rx).await }))
}

/// A relay running in this process until stopped.
struct RelayTask {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RelayTask {
    fn start(stack: &Stack, id: &str, publisher: Arc<dyn Publisher>) -> Self {
        let relay = OutboxRelay::new(
            stack.outbox.clone(),
            publisher,
            RelayConfig {
                relay_id: id.into(),
                idle_wait: Duration::from_millis(100),
                ..RelayConfig::default()
            },
        );
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(async move { relay.run(rx).await });
        Self { stop, task }
    }

    /// Stop: what was confirmed is marked, what was claimed and not sent is given back.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// One broker's feed, stopped by one switch: the orders service's consumer of rejections in
/// this process, and the inventory consumer process, restarted by its supervisor after every
/// kill.
struct Feed {
    stop: watch::Sender<bool>,
    orders: JoinHandle<()>,
    slot: Arc<Mutex<Option<Worker>>>,
    supervisor: JoinHandle<()>,
}

impl Feed {
    /// The feed on `transport`, which the consumer process reaches at `broker`; the process
    /// is armed to crash on `crash_order` if given, and its kills are counted in `kills`.
    async fn start(
        stack: &Stack,
        args: &DemoArgs,
        ladder: &postroom_core::RetryLadder,
        transport: &dyn Transport,
        broker: &Endpoint,
        crash_order: Option<&str>,
        kills: Arc<AtomicU64>,
    ) -> OpsResult<Self> {
        let (stop, rx) = watch::channel(false);
        let orders = spawn_orders_consumer(stack, transport, ladder, &rx).await?;
        let mut argv: Vec<OsString> = vec![
            consumer::COMMAND.into(),
            "--ladder".into(),
            args.ladder.clone().into(),
            "--workload".into(),
            args.workload.clone().into(),
        ];
        if let Some(order) = crash_order {
            argv.extend(["--crash-order".into(), order.into()]);
        }
        let env = ChildEnv {
            database: stack.database.clone(),
            broker: Some(broker.clone()),
        };
        let slot = Arc::new(Mutex::new(None::<Worker>));
        let supervisor = tokio::spawn(supervise(argv, env, slot.clone(), kills, rx));
        Ok(Self {
            stop,
            orders,
            slot,
            supervisor,
        })
    }

    /// SIGKILL the running process (its supervisor starts it again); `false` when none was
    /// running.
    async fn kill(&self, feed: &str) -> bool {
        let Some(mut w) = self.slot.lock().await.take() else {
            return false;
        };
        eprintln!(
            "         {feed} inventory consumer {} killed with SIGKILL during the overlap",
            w.pid()
        );
        w.kill().await;
        true
    }

    /// Turn its stop switch: the supervisor ends, the process stops gracefully, then the
    /// orders consumer ends.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.supervisor.await;
        if let Some(w) = self.slot.lock().await.take() {
            w.stop(Duration::from_secs(10)).await;
        }
        let _ = self.orders.await;
    }
}

/// Wait up to [`STEP_LIMIT`] for `cond`, polling.
async fn wait_for(what: &str, mut cond: impl AsyncFnMut() -> bool) -> OpsResult {
    let deadline = Instant::now() + STEP_LIMIT;
    while Instant::now() < deadline {
        if cond().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if cond().await {
        return Ok(());
    }
    Err(OpsError::failed(format!(
        "the move stopped: waited {} s for {what}",
        STEP_LIMIT.as_secs()
    )))
}
