//! A complete postroom service on SQLite alone (no server): a producer writes orders and
//! their outbox rows in one transaction, the relay publishes them to the queue in the same
//! file, and an inventory consumer reserves stock through its inbox.
//!
//! ```sh
//! cargo run -p postroom-examples --bin sqlite            # DATABASE_URL=app.db to keep the file
//! ```
//!
//! This file opens the store and keeps what is SQLite's own (the handler, its table, the
//! producer's transaction, the count); the rest of the shop it runs, with the faults it
//! injects, is in `examples/src/shop.rs`. The program exits 0 only when every order was
//! applied exactly once; otherwise it says what went wrong and exits 1. To make it yours,
//! change `OrderCreated` in examples/src/shop.rs and `Reserve::handle` below, and drop the two
//! marked fault injections.

use postroom::sqlite::{SqliteStore, inbox, outbox};
use postroom::{Handled, HandlerError, Message, RetryPolicy, Service, TypedHandler, async_trait};
use postroom_examples::shop::{self, CONSUMER, Copies, OrderCreated, Reservations};
use std::process::ExitCode;

/// The consumer's handler: the inbox claim and the effect in one transaction.
struct Reserve {
    store: SqliteStore,
}

#[async_trait]
impl TypedHandler<OrderCreated> for Reserve {
    async fn handle(&self, m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
        shop::call_stock_service(&m)?; // fault injection
        let mut tx = self.store.begin().await?;
        if !inbox::claim(&mut tx, CONSUMER, m.id()).await? {
            return Ok(Handled::Duplicate); // applied before: apply nothing, ack
        }
        sqlx::query("INSERT INTO example_reservations (order_id, qty) VALUES (?, ?)")
            .bind(&m.data.order_id)
            .bind(m.data.qty)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Handled::Applied)
    }
}

/// This run's rows in the handler's table (see `Reservations`).
const COUNT_RESERVATIONS: &str = "SELECT count(*), count(DISTINCT order_id), coalesce(sum(qty), 0) FROM example_reservations WHERE order_id LIKE ?";

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    shop::init_logging();
    let dir = std::env::temp_dir().join(format!("postroom-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let database =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| dir.join("app.db").display().to_string());

    // One place: the store (and its queue), the retry ladder declared once, the consumer,
    // the relay.
    let service = Service::builder()
        .database(&database)
        .retry(RetryPolicy::default().ladder("1s,2s".parse()?).retries(3))
        .open()
        .await?;
    let store = service.store::<SqliteStore>().ok_or("not SQLite")?.clone();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS example_reservations (order_id TEXT NOT NULL, qty INTEGER NOT NULL)",
    )
    .execute(store.pool())
    .await?;
    let reserve = Reserve {
        store: store.clone(),
    };
    let running = service
        .consumer(postroom::consumer::<OrderCreated>(CONSUMER, reserve))
        .relay()
        .start()
        .await?;
    println!("consumers attached: {:?}", running.consumer_names());

    // The producer: each order's business row and outbox row in one transaction.
    let run = shop::run_id(); // this run's orders, in a file kept between runs
    let orders = shop::orders(&run)?;
    for order in &orders {
        let mut tx = store.begin().await?;
        outbox::enqueue(&mut tx, &order.message).await?;
        tx.commit().await?;
    }
    let sent_again = shop::send_copies_again(&running, &orders).await?;

    let reservations = async || {
        sqlx::query_as::<_, (i64, i64, i64)>(COUNT_RESERVATIONS)
            .bind(format!("{run}-%"))
            .fetch_one(store.pool())
            .await
            .map(Reservations::from)
    };
    let verdict = shop::wait_and_verify(
        running,
        &run,
        sent_again,
        Copies::ReachTheInbox,
        reservations,
    )
    .await?;
    if std::env::var("DATABASE_URL").is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(verdict)
}
