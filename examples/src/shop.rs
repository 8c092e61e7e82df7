//! The shop every example runs: a producer writes [`ORDERS`] orders, each order's outbox row in
//! a transaction of its own; the relay publishes them; the inventory consumer ([`CONSUMER`])
//! reserves stock for each through its inbox.
//!
//! To make the run prove something, the stock service is flaky for some orders (their first
//! delivery fails with a transient error and is retried after the ladder's delay), and some
//! messages are delivered twice (as after a relay crash between publish and mark). The check,
//! [`wait_and_verify`], gives exit code 0 only when every order was applied exactly once;
//! otherwise it says what went wrong and gives 1.
//!
//! To make it yours, change [`OrderCreated`] and [`Reserve::handle`] (on SQLite, the
//! `Reserve::handle` in `src/bin/sqlite.rs`), and drop the two marked fault injections,
//! [`call_stock_service`] and [`send_copies_again`].
//!
//! The PostgreSQL side is here too: the handler [`Reserve`], its table, the producer, the count,
//! and [`run_on_postgres`], the whole run on a service an example wired. The SQLite example
//! keeps its own and shares the rest.

use postroom::postgres::{PgStore, commit, inbox, outbox};
use postroom::{
    Contract, Envelope, Handled, HandlerError, Message, MessageId, OutgoingMessage, Running,
    Service, TypedHandler, async_trait,
};
use serde::{Deserialize, Serialize};
use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How many orders the producer writes.
pub const ORDERS: i64 = 30;

/// The inventory consumer's name (its inbox's too).
pub const CONSUMER: &str = "inventory";

/// The message: its type and schema version are its contract.
#[derive(Serialize, Deserialize)]
pub struct OrderCreated {
    /// The order, `<run>-<n>`.
    pub order_id: String,
    /// How many items to reserve.
    pub qty: i64,
}

impl Contract for OrderCreated {
    const TYPE: &'static str = "order.created";
}

/// Logs to stderr at the level `RUST_LOG` says, `warn` by default.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .init();
}

/// The PostgreSQL database: `DATABASE_URL`, or the local server's `postgres` database.
#[must_use]
pub fn postgres_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// This run's tag: it names the run's orders (in tables and files kept between runs) and,
/// where an example puts its broker's names under it, the run's queues or topics.
#[must_use]
pub fn run_id() -> String {
    let id = MessageId::new().to_string();
    id[id.len() - 8..].to_string()
}

fn order_id(run: &str, n: i64) -> String {
    format!("{run}-{n}")
}

/// An order as the producer writes it to the outbox.
pub struct Order {
    /// `OrderCreated` in its envelope; its aggregate key header keeps one order's messages
    /// in order.
    pub message: OutgoingMessage,
}

/// This run's orders, `<run>-1` to `<run>-30`; order `n` reserves `n` items.
pub fn orders(run: &str) -> Result<Vec<Order>, serde_json::Error> {
    (1..=ORDERS)
        .map(|n| {
            let order = OrderCreated {
                order_id: order_id(run, n),
                qty: n,
            };
            let env = Envelope::builder(OrderCreated::TYPE, "shop")
                .aggregate("order", &order.order_id, 1)
                .data(serde_json::to_value(&order)?)
                .build();
            Ok(Order {
                message: OutgoingMessage::from_envelope(&env, OrderCreated::TYPE),
            })
        })
        .collect()
}

/// Fault injection (drop it in your service): the stock service the handler calls is down for
/// every fifth order's first delivery, a transient error the ladder retries.
pub fn call_stock_service(m: &Message<OrderCreated>) -> Result<(), HandlerError> {
    if m.attempt == 0 && flaky(&m.data.order_id) {
        return Err(HandlerError::transient(
            "stock_unavailable",
            "stock service down",
        ));
    }
    Ok(())
}

fn flaky(order_id: &str) -> bool {
    order_id.ends_with('5') || order_id.ends_with('0')
}

/// Fault injection (drop it in your service): every seventh message a second time, as a relay
/// that crashed after publishing and before marking the row would send it. Returns how many
/// copies it sent.
pub async fn send_copies_again(running: &Running, orders: &[Order]) -> postroom::Result<usize> {
    let publisher = running.transport().publisher();
    let copies: Vec<&Order> = orders.iter().step_by(7).collect();
    for order in &copies {
        publisher.publish(&order.message).await?;
    }
    Ok(copies.len())
}

/// What the handler's table holds for this run's orders.
pub struct Reservations {
    /// Rows, one per order applied.
    pub applied: i64,
    /// Distinct orders among them.
    pub distinct: i64,
    /// The quantity reserved, summed.
    pub total: i64,
}

impl From<(i64, i64, i64)> for Reservations {
    /// From the row `count(*), count(DISTINCT order_id), sum(qty)`.
    fn from((applied, distinct, total): (i64, i64, i64)) -> Self {
        Self {
            applied,
            distinct,
            total,
        }
    }
}

/// Where the copies [`send_copies_again`] sent end up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Copies {
    /// Each reaches the consumer, whose inbox absorbs it: the check waits for every one.
    ReachTheInbox,
    /// The stream drops a copy of a message id it saw within its duplicate window (JetStream);
    /// the inbox absorbs the others. The check reports how many reached the inbox and expects
    /// no number.
    MayBeDroppedByTheStream,
}

/// Waits (a minute at the most) until every order is applied and, where every copy reaches
/// the inbox, every copy is absorbed; stops the service, prints the summary and gives the
/// verdict: success only when every order was applied exactly once with none parked,
/// otherwise failure, after printing what went wrong. `reservations` counts this run's rows in
/// the handler's table.
pub async fn wait_and_verify(
    running: Running,
    run: &str,
    sent_again: usize,
    copies: Copies,
    reservations: impl AsyncFn() -> Result<Reservations, sqlx::Error>,
) -> Result<ExitCode, sqlx::Error> {
    let sent_again = sent_again as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let Reservations {
        applied,
        distinct,
        total,
    } = loop {
        let counted = reservations().await?;
        let absorbed = running.stats(CONSUMER).unwrap_or_default().duplicates;
        let settled = counted.applied >= ORDERS
            && (copies == Copies::MayBeDroppedByTheStream || absorbed >= sent_again);
        if settled || Instant::now() > deadline {
            break counted;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stats = running.stats(CONSUMER).unwrap_or_default();
    running.shutdown().await;

    let retried: u64 = stats.retries_by_stage.values().sum();
    let flaky_orders = (1..=ORDERS).filter(|n| flaky(&order_id(run, *n))).count() as u64;
    let absorbed = match copies {
        Copies::ReachTheInbox => format!("duplicates absorbed {}", stats.duplicates),
        Copies::MayBeDroppedByTheStream => format!(
            "copies sent again {sent_again}, absorbed by the inbox {} (the others by the stream)",
            stats.duplicates
        ),
    };
    println!(
        "orders {ORDERS}: applied {applied} (distinct {distinct}), {absorbed}, retries {retried}, parked {:?}",
        stats.parked_by_code
    );
    let mut failures = Vec::new();
    if applied != ORDERS || distinct != ORDERS {
        failures.push(format!(
            "{applied} reservations for {distinct} of {ORDERS} orders"
        ));
    }
    if total != ORDERS * (ORDERS + 1) / 2 {
        failures.push(format!("reserved quantity {total}"));
    }
    if copies == Copies::ReachTheInbox && stats.duplicates < sent_again {
        failures.push(format!(
            "{} duplicates absorbed of {sent_again} sent",
            stats.duplicates
        ));
    }
    if retried < flaky_orders {
        failures.push(format!("{retried} retries for {flaky_orders} flaky orders"));
    }
    if !stats.parked_by_code.is_empty() {
        failures.push(format!("parked: {:?}", stats.parked_by_code));
    }
    if failures.is_empty() {
        println!("every order applied exactly once");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("FAILED: {}", failures.join("; "));
        Ok(ExitCode::FAILURE)
    }
}

/// The inventory consumer's handler on PostgreSQL: the inbox claim and the effect in one
/// transaction.
pub struct Reserve {
    /// Where the inbox and the reservations are.
    pub store: PgStore,
}

#[async_trait]
impl TypedHandler<OrderCreated> for Reserve {
    async fn handle(&self, m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
        call_stock_service(&m)?; // fault injection
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, self.store.prefix(), CONSUMER, m.id()).await? {
            return Ok(Handled::Duplicate); // applied before: apply nothing, ack
        }
        sqlx::query("INSERT INTO example_reservations (order_id, qty) VALUES ($1, $2)")
            .bind(&m.data.order_id)
            .bind(m.data.qty)
            .execute(&mut *tx)
            .await?;
        commit(tx).await?;
        Ok(Handled::Applied)
    }
}

/// This run's rows in the PostgreSQL handler's table (see [`Reservations`]).
const COUNT_RESERVATIONS: &str = "SELECT count(*), count(DISTINCT order_id), coalesce(sum(qty), 0)::BIGINT FROM example_reservations WHERE order_id LIKE $1";

/// The whole run on a PostgreSQL service an example wired (store, transport, retry ladder):
/// the reservations table, the inventory consumer and the relay started, the orders produced,
/// copies sent again, and the check's verdict.
pub async fn run_on_postgres(
    service: Service,
    run: &str,
    copies: Copies,
) -> Result<ExitCode, Box<dyn Error>> {
    let store = service.store::<PgStore>().ok_or("not PostgreSQL")?.clone();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS example_reservations (order_id TEXT NOT NULL, qty BIGINT NOT NULL)",
    )
    .execute(store.pool())
    .await?;
    let running = service
        .consumer(postroom::consumer::<OrderCreated>(
            CONSUMER,
            Reserve {
                store: store.clone(),
            },
        ))
        .relay()
        .start()
        .await?;
    println!("consumers attached: {:?}", running.consumer_names());

    // The producer: each order's business row and outbox row in one transaction.
    let orders = orders(run)?;
    for order in &orders {
        let mut tx = store.begin().await?;
        outbox::enqueue(&mut tx, store.prefix(), &order.message).await?;
        commit(tx).await?;
    }
    let sent_again = send_copies_again(&running, &orders).await?;

    let reservations = async || {
        sqlx::query_as::<_, (i64, i64, i64)>(COUNT_RESERVATIONS)
            .bind(format!("{run}-%"))
            .fetch_one(store.pool())
            .await
            .map(Reservations::from)
    };
    Ok(wait_and_verify(running, run, sent_again, copies, reservations).await?)
}
