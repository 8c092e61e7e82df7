//! `postroom demo`: the orders → inventory example of the source article, end to end on the
//! embedded store, with its faults injected.
//!
//! The orders service writes each order and its `order.created` outbox row in one
//! transaction; a relay publishes them; the inventory consumer — a separate OS process —
//! reserves stock through its inbox. Faults: transient database failures that heal within the
//! retry budget and one that outlasts it; corrupt JSON and an unknown schema version;
//! out-of-stock orders (a business outcome published through the consumer's own outbox);
//! duplicate deliveries; and a consumer killed with SIGKILL between its COMMIT and its ack.

pub mod child;
pub mod inventory;
pub mod report;
pub mod schema;

use crate::cli::DemoArgs;
use crate::error::{CliError, CliErrorKind, CliResult};
use inventory::{ORDERS_CONSUMER, RejectionHandler};
use postroom_core::{
    Consumer, ConsumerConfig, Envelope, EnvelopeDecoder, MessageId, OutboxRelay, OutboxStore,
    OutgoingMessage, Publisher, RelayConfig, RetryLadder, Route,
};
use postroom_sqlite::{SqliteStore, SubscribeOptions, outbox};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, watch};

/// What the producer set up, for the checks at the end.
struct Plan {
    poison_ids: Vec<String>,
    crash_order: String,
}

/// Run the demo.
pub async fn run(args: DemoArgs) -> CliResult {
    let ladder: RetryLadder = args.ladder.parse().map_err(CliError::usage)?;
    let path = crate::config::sqlite_path(
        Some(&args.database),
        &Default::default(),
        "postroom-demo.db",
    )?;
    prepare_file(&path).await?;
    let started = Instant::now();
    let store = SqliteStore::open(&path).await?;
    schema::create(&store).await?;
    let queue = store.queue();
    // Bind both consumers before anything is published, so nothing is unroutable.
    queue.bind(inventory::CONSUMER, &["order.created"]).await?;
    queue
        .bind(ORDERS_CONSUMER, &["inventory.reservation_rejected"])
        .await?;

    eprintln!(
        "postroom demo: database {}, ladder {ladder}, {} orders",
        path.display(),
        args.orders
    );
    let plan = produce(&store, args.orders).await?;

    let (stop, stop_rx) = watch::channel(false);
    // The relay, in this process.
    let relay = OutboxRelay::new(
        Arc::new(store.clone()),
        Arc::new(queue.clone()),
        RelayConfig {
            relay_id: "demo-relay".into(),
            idle_wait: Duration::from_millis(100),
            ..RelayConfig::default()
        },
    );
    let relay_rx = stop_rx.clone();
    let relay_task = tokio::spawn(async move { relay.run(relay_rx).await });
    // The orders service's consumer of rejections, in this process.
    let orders_sub = queue
        .subscribe(
            ORDERS_CONSUMER,
            &["inventory.reservation_rejected"],
            SubscribeOptions::default(),
        )
        .await?;
    let mut ocfg = ConsumerConfig::new(
        ORDERS_CONSUMER,
        EnvelopeDecoder::new().accept("inventory.reservation_rejected", 1..=1),
    );
    ocfg.retry = child::policy(ladder.clone());
    let orders_consumer = Consumer::new(
        ocfg,
        Arc::new(RejectionHandler {
            store: store.clone(),
        }),
    );
    let orders_rx = stop_rx.clone();
    let orders_task = tokio::spawn(async move { orders_consumer.run(orders_sub, orders_rx).await });

    // The inventory consumer, as a child process that gets killed once.
    let kills = Arc::new(AtomicU64::new(0));
    let supervisor = Supervisor {
        path: path.clone(),
        ladder: args.ladder.clone(),
        crash_order: plan.crash_order.clone(),
        kills: kills.clone(),
    };
    let child_slot = Arc::new(Mutex::new(None::<Child>));
    let sup_task = tokio::spawn(supervisor.run(child_slot.clone(), stop_rx.clone()));

    let injected = inject_duplicates(&store, &queue).await?;
    let settled = wait_until_settled(&store, &ladder, &plan, args.timeout_secs, &kills).await;

    let _ = stop.send(true);
    let _ = sup_task.await;
    if let Some(mut c) = child_slot.lock().await.take() {
        drop(c.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
        let _ = c.kill().await;
    }
    let _ = relay_task.await;
    let _ = orders_task.await;

    let mut report = report::compute(&store, &ladder).await?;
    report.duplicates_injected = injected;
    report.consumer_kills = kills.load(Ordering::SeqCst);
    report.killed_order = Some(plan.crash_order.clone());
    report.killed_order_reservations =
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM reservations WHERE order_id = ?")
            .bind(&plan.crash_order)
            .fetch_one(store.pool())
            .await? as u64;
    report.killed_order_redelivered = sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM demo_duplicates d JOIN orders o ON o.message_id = d.message_id WHERE o.id = ?",
    )
    .bind(&plan.crash_order)
    .fetch_one(store.pool())
    .await?
        > 0;
    report.elapsed_s = started.elapsed().as_secs_f64();
    report.check(&ladder, &plan.poison_ids);
    if let Err(e) = settled {
        report.failures.push(e);
    }
    report.print();
    if let Some(p) = &args.report_json {
        let json = serde_json::to_string_pretty(&report).expect("report serialises");
        std::fs::write(p, json)
            .map_err(|e| CliError::usage(format!("cannot write report {}: {e}", p.display())))?;
    }
    eprintln!(
        "look at the parked messages: postroom parking list --database {}",
        path.display()
    );
    if report.failures.is_empty() {
        Ok(())
    } else {
        Err(CliError {
            kind: CliErrorKind::InvariantFailed,
            message: format!("{} invariant(s) failed", report.failures.len()),
        })
    }
}

/// Remove a previous demo database; refuse to touch any other file.
async fn prepare_file(path: &Path) -> CliResult {
    if path.exists() {
        let is_demo = match SqliteStore::open(path).await {
            Ok(s) => sqlx::query_scalar::<_, String>(
                "SELECT value FROM demo_meta WHERE key = 'created_by'",
            )
            .fetch_optional(s.pool())
            .await
            .ok()
            .flatten()
            .is_some(),
            Err(_) => false,
        };
        if !is_demo {
            return Err(CliError::usage(format!(
                "{} exists and is not a postroom demo database; pass another --database",
                path.display()
            )));
        }
        for suffix in ["", "-wal", "-shm"] {
            let p = format!("{}{suffix}", path.display());
            let _ = std::fs::remove_file(p);
        }
    }
    Ok(())
}

/// Create the orders (business row + outbox row in one transaction each), the fault plan and
/// two poison messages.
async fn produce(store: &SqliteStore, n: u32) -> CliResult<Plan> {
    let mut crash_order = String::new();
    for i in 1..=n {
        let id = format!("ord-{i:05}");
        // Orders 4..=7 want the two RARE items; order 8 wants more GADGETs than there are.
        let (sku, qty) = match i {
            4..=7 => ("RARE", 1),
            8 => ("GADGET", 5),
            _ => ("WIDGET", 1 + i64::from(i % 3)),
        };
        let env = Envelope::builder("order.created", "orders")
            .aggregate("order", &id, 1)
            .correlation_id(format!("checkout-{i}"))
            .data(serde_json::json!({"order_id": id, "sku": sku, "qty": qty}))
            .build();
        let mut tx = store.begin().await?;
        sqlx::query("INSERT INTO orders (id, sku, qty, message_id) VALUES (?, ?, ?, ?)")
            .bind(&id)
            .bind(sku)
            .bind(qty)
            .bind(env.id.to_string())
            .execute(&mut *tx)
            .await?;
        // Faults: heal after 1, 2 and 3 failures (one retry through each stage), and one that never heals.
        let fail_times = match i {
            1 => Some(1),
            2 => Some(2),
            3 => Some(3),
            9 => Some(99),
            _ => None,
        };
        if let Some(f) = fail_times {
            sqlx::query("INSERT INTO demo_faults (order_id, fail_times) VALUES (?, ?)")
                .bind(&id)
                .bind(f)
                .execute(&mut *tx)
                .await?;
        }
        if i == 10 {
            crash_order = id.clone();
        }
        outbox::enqueue(
            &mut tx,
            &OutgoingMessage::from_envelope(&env, "order.created"),
        )
        .await?;
        tx.commit().await?;
    }
    // Poison: a body that is not JSON, and an envelope with a schema version nobody knows.
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
    let mut tx = store.begin().await?;
    outbox::enqueue(&mut tx, &corrupt).await?;
    outbox::enqueue(&mut tx, &v99).await?;
    tx.commit().await?;
    Ok(Plan {
        poison_ids: vec![corrupt.id.to_string(), v99.id.to_string()],
        crash_order,
    })
}

/// Publish a few already-relayed orders again with the same id: duplicate deliveries.
async fn inject_duplicates(
    store: &SqliteStore,
    queue: &postroom_sqlite::SqliteQueue,
) -> CliResult<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows: Vec<(String, Vec<u8>, String)> = sqlx::query_as(
            "SELECT o.message_id, o.body, o.headers FROM postroom_outbox o JOIN orders ord ON ord.message_id = o.message_id
             WHERE o.published_at IS NOT NULL AND ord.id IN ('ord-00011', 'ord-00012', 'ord-00013')",
        )
        .fetch_all(store.pool())
        .await?;
        if rows.len() == 3 {
            let mut n = 0;
            for (id, body, headers) in rows {
                let msg = OutgoingMessage {
                    id: id
                        .parse()
                        .map_err(|e| CliError::failed(format!("bad id in outbox: {e}")))?,
                    route: Route::Topic("order.created".into()),
                    headers: serde_json::from_str(&headers).unwrap_or_default(),
                    body,
                };
                queue.publish(&msg).await?;
                n += 1;
            }
            return Ok(n);
        }
        if Instant::now() > deadline {
            return Err(CliError::failed(
                "the relay did not publish the first orders within 30 s",
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait until every order and poison message is resolved and the queues are empty, printing
/// progress.
async fn wait_until_settled(
    store: &SqliteStore,
    ladder: &RetryLadder,
    plan: &Plan,
    timeout_secs: u64,
    kills: &AtomicU64,
) -> Result<(), String> {
    let started = Instant::now();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    loop {
        let r = report::compute(store, ladder)
            .await
            .map_err(|e| e.to_string())?;
        let queued: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM postroom_queue")
            .fetch_one(store.pool())
            .await
            .map_err(|e| e.to_string())?;
        let pending = store.pending().await.map_err(|e| e.to_string())?;
        let poison_parked = plan
            .poison_ids
            .iter()
            .all(|id| r.parked_messages.iter().any(|p| &p.id == id));
        let resolved = r.orders - r.lost;
        if last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            let stages: Vec<String> = r
                .retries_by_stage
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            eprintln!(
                "[{:>5.1}s] resolved {}/{} | reserved {} | rejected {} | parked {} | retries {} | duplicates absorbed {} | kills {} | in flight {} | outbox {}",
                started.elapsed().as_secs_f64(),
                resolved,
                r.orders,
                r.reserved,
                r.rejected,
                r.parked,
                if stages.is_empty() {
                    "-".into()
                } else {
                    stages.join(" ")
                },
                r.duplicates_absorbed,
                kills.load(Ordering::SeqCst),
                queued,
                pending
            );
        }
        if r.lost == 0
            && poison_parked
            && queued == 0
            && pending == 0
            && kills.load(Ordering::SeqCst) > 0
        {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(timeout_secs) {
            return Err(format!("the demo did not settle within {timeout_secs} s"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Starts the inventory consumer process, kills it with SIGKILL at its crash point, restarts it.
struct Supervisor {
    path: std::path::PathBuf,
    ladder: String,
    crash_order: String,
    kills: Arc<AtomicU64>,
}

impl Supervisor {
    fn spawn(&self) -> std::io::Result<Child> {
        let exe = std::env::current_exe()?;
        Command::new(exe)
            .arg("demo-consumer")
            .arg("--database")
            .arg(&self.path)
            .arg("--ladder")
            .arg(&self.ladder)
            .arg("--crash-order")
            .arg(&self.crash_order)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
    }

    async fn run(self, slot: Arc<Mutex<Option<Child>>>, mut stop: watch::Receiver<bool>) {
        loop {
            let mut child = match self.spawn() {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("cannot start the consumer process: {e}");
                    return;
                }
            };
            let pid = child.id().unwrap_or_default();
            let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
            *slot.lock().await = Some(child);
            loop {
                tokio::select! {
                    line = lines.next_line() => match line {
                        Ok(Some(l)) if l.starts_with("CRASH-POINT") => {
                            if let Some(mut c) = slot.lock().await.take() {
                                let _ = c.kill().await; // SIGKILL
                                let _ = c.wait().await;
                            }
                            self.kills.fetch_add(1, Ordering::SeqCst);
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
}
