//! The batched consumer through the front door, on PostgreSQL + RabbitMQ: declared in one
//! line with its handler, subscribed with a prefetch derived from its batch settings (so
//! batches of many messages form), run on the service's retry ladder, its poison message
//! parked and ingested into the store's parking lot, its counters in `Running::stats`.

use postroom::{
    BatchHandler, Contract, Envelope, Handled, HandlerError, Incoming, OutgoingMessage,
    RetryPolicy, Service, async_trait, batch_consumer, consumer,
};
use postroom_core::{ParkingFilter, ParkingStore};
use postroom_testkit::servers::{TestDb, suffix};
use postroom_testkit::wait::eventually;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Serialize, Deserialize)]
struct OrderCreated {
    order_id: String,
}

impl Contract for OrderCreated {
    const TYPE: &'static str = "order.created";
}

fn amqp() -> String {
    std::env::var("POSTROOM_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn rabbit_api() -> String {
    std::env::var("POSTROOM_TEST_RABBIT_API")
        .unwrap_or_else(|_| "http://guest:guest@127.0.0.1:15672".into())
}

/// Deletes a test's queues, exchanges and policies on drop.
struct BrokerNames(String);

impl Drop for BrokerNames {
    fn drop(&mut self) {
        let prefix = format!("{}.", self.0);
        postroom_testkit::servers::clean_up(async move {
            let api = postroom_rabbitmq::ManagementApi::new(&rabbit_api(), "/").unwrap();
            let _ = api.delete_everything_named(&prefix).await;
        });
    }
}

/// Applies a batch in one transaction: one inbox statement, one insert per new message. A
/// batch holding the poison order fails whole (as a constraint violation would).
struct Reserve {
    store: postroom_postgres::PgStore,
    batches: Mutex<Vec<usize>>,
}

#[async_trait]
impl BatchHandler for Reserve {
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError> {
        self.batches.lock().unwrap().push(batch.len());
        if batch
            .iter()
            .any(|m| m.envelope.data["order_id"] == "poison")
        {
            return Err(HandlerError::permanent(
                "constraint_violation",
                "order poison violates a constraint",
            ));
        }
        let mut tx = self.store.begin().await?;
        let ids: Vec<_> = batch.iter().map(|m| m.envelope.id).collect();
        let new =
            postroom_postgres::inbox::claim_many(&mut tx, self.store.prefix(), "inventory", &ids)
                .await?;
        for m in batch.iter().filter(|m| new.contains(&m.envelope.id)) {
            sqlx::query("INSERT INTO reservations (order_id) VALUES ($1)")
                .bind(m.envelope.data["order_id"].as_str())
                .execute(&mut *tx)
                .await?;
        }
        postroom_postgres::commit(tx).await?;
        Ok(batch
            .iter()
            .map(|m| {
                Ok(if new.contains(&m.envelope.id) {
                    Handled::Applied
                } else {
                    Handled::Duplicate
                })
            })
            .collect())
    }
}

/// `orders` outbox rows in one transaction, all good orders but the one at `poison_at`.
async fn enqueue_orders(store: &postroom_postgres::PgStore, orders: usize, poison_at: usize) {
    let mut tx = store.begin().await.unwrap();
    for i in 0..orders {
        let order_id = if i == poison_at {
            "poison".to_string()
        } else {
            format!("o-{i}")
        };
        let env = Envelope::builder(OrderCreated::TYPE, "tests")
            .aggregate("order", &order_id, 1)
            .data(serde_json::json!({ "order_id": order_id }))
            .build();
        let msg = OutgoingMessage::from_envelope(&env, OrderCreated::TYPE);
        postroom_postgres::outbox::enqueue(&mut tx, store.prefix(), &msg)
            .await
            .unwrap();
    }
    postroom_postgres::commit(tx).await.unwrap();
}

/// Reservations made, and distinct orders among them.
async fn applied(pool: &sqlx::PgPool) -> (i64, i64) {
    sqlx::query_as("SELECT count(*), count(DISTINCT order_id) FROM reservations")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn open(db: &TestDb, names: &BrokerNames) -> Service {
    Service::builder()
        .database(&db.url)
        .broker(&amqp())
        .prefix(&names.0)
        .retry(
            RetryPolicy::default()
                .ladder("1s".parse().unwrap())
                .retries(2),
        )
        .open()
        .await
        .expect("open a service on PostgreSQL and RabbitMQ")
}

/// Runs `orders` through a batched consumer declared with `declare` and returns the sizes
/// of the batches its handler saw, after checking every good order was applied once and
/// the poison order parked with its reason.
async fn run_batched(
    prefetch: Option<usize>,
    orders: usize,
) -> (Vec<usize>, postroom::StatsSnapshot) {
    let db = TestDb::create().await;
    let names = BrokerNames(format!("bat-{}", suffix()));
    let service = open(&db, &names).await;
    let store = service
        .store::<postroom_postgres::PgStore>()
        .unwrap()
        .clone();
    sqlx::query("CREATE TABLE reservations (order_id TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let handler = Arc::new(Reserve {
        store: store.clone(),
        batches: Mutex::new(Vec::new()),
    });
    let mut spec = batch_consumer::<OrderCreated>("inventory", handler.clone())
        .batch_size(50)
        .linger(Duration::from_millis(200));
    if let Some(n) = prefetch {
        spec = spec.prefetch(n);
    }
    // The whole backlog is in the outbox before the consumer starts: the relay publishes it
    // at once, so the consumer's prefetch decides how many messages a batch can gather.
    enqueue_orders(&store, orders, orders / 2).await;
    let running = service.consumer(spec).relay().start().await.unwrap();
    let applied = || applied(store.pool());
    let good = i64::try_from(orders - 1).unwrap();
    let parking = store.parking();
    assert!(
        eventually(Duration::from_secs(60), || async {
            applied().await.0 >= good
                && !parking
                    .search(&ParkingFilter::default(), 10)
                    .await
                    .unwrap()
                    .is_empty()
        })
        .await,
        "every good order applied and the poison one parked; applied {:?}",
        applied().await
    );
    let stats = running
        .stats("inventory")
        .expect("the batched consumer's stats");
    assert!(running.is_running());
    running.shutdown().await;
    assert_eq!(
        applied().await,
        (good, good),
        "each good order applied once"
    );
    let parked = parking.search(&ParkingFilter::default(), 10).await.unwrap();
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].error_code, "constraint_violation", "{parked:?}");
    let batches = handler.batches.lock().unwrap().clone();
    (batches, stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_consumer_declared_in_one_line_forms_batches_from_its_derived_prefetch() {
    let (batches, stats) = run_batched(None, 300).await;
    let largest = batches.iter().copied().max().unwrap_or(0);
    // The per-message default prefetch (twice the concurrency: 8) would cap every batch at 8.
    assert!(
        largest > 8,
        "batches of more than a per-message prefetch formed: {batches:?}"
    );
    assert!(stats.applied >= 299, "{stats:?}");
    assert_eq!(
        stats.parked_by_code.get("constraint_violation"),
        Some(&1),
        "{stats:?}"
    );
}

/// The check above can fail: with a prefetch of 2 a batch cannot hold more than 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_small_prefetch_the_batches_stay_small() {
    let (batches, _) = run_batched(Some(2), 60).await;
    let largest = batches.iter().copied().max().unwrap_or(0);
    assert!(largest <= 2, "{batches:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_settings_on_a_per_message_consumer_are_refused_at_start() {
    struct Nothing;
    #[async_trait]
    impl postroom::TypedHandler<OrderCreated> for Nothing {
        async fn handle(
            &self,
            _m: postroom::Message<OrderCreated>,
        ) -> Result<Handled, HandlerError> {
            Ok(Handled::Applied)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("refused.db");
    let err = Service::builder()
        .database(db.to_str().unwrap())
        .open()
        .await
        .unwrap()
        .consumer(consumer::<OrderCreated>("inventory", Nothing).batch_size(10))
        .start()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("batch_size") && err.to_string().contains("inventory"),
        "{err}"
    );
}

/// Applies one message per transaction; the poison order fails permanently.
struct ReserveOne {
    store: postroom_postgres::PgStore,
}

#[async_trait]
impl postroom::TypedHandler<OrderCreated> for ReserveOne {
    async fn handle(&self, m: postroom::Message<OrderCreated>) -> Result<Handled, HandlerError> {
        if m.data.order_id == "poison" {
            return Err(HandlerError::permanent(
                "constraint_violation",
                "order poison violates a constraint",
            ));
        }
        let mut tx = self.store.begin().await?;
        if !postroom_postgres::inbox::claim(&mut tx, self.store.prefix(), "inventory", m.id())
            .await?
        {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO reservations (order_id) VALUES ($1)")
            .bind(&m.data.order_id)
            .execute(&mut *tx)
            .await?;
        postroom_postgres::commit(tx).await?;
        Ok(Handled::Applied)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_queue_consumer_declared_in_one_line_stores_then_applies_each_message_once() {
    let db = TestDb::create().await;
    let names = BrokerNames(format!("iqf-{}", suffix()));
    let service = open(&db, &names).await;
    let store = service
        .store::<postroom_postgres::PgStore>()
        .unwrap()
        .clone();
    sqlx::query("CREATE TABLE reservations (order_id TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let running = service
        .consumer(
            consumer::<OrderCreated>(
                "inventory",
                ReserveOne {
                    store: store.clone(),
                },
            )
            .inbox_queue(postroom::InboxQueueMode {
                workers: 4,
                ..postroom::InboxQueueMode::default()
            }),
        )
        .relay()
        .start()
        .await
        .unwrap();
    enqueue_orders(&store, 100, 50).await;
    let applied = || applied(store.pool());
    let parking = store.parking();
    assert!(
        eventually(Duration::from_secs(60), || async {
            applied().await.0 >= 99
                && !parking
                    .search(&ParkingFilter::default(), 10)
                    .await
                    .unwrap()
                    .is_empty()
        })
        .await,
        "every good order applied and the poison one parked; applied {:?}",
        applied().await
    );
    let stats = running.stats("inventory").unwrap();
    // What the service says of itself: the inbox holds each applied order once (the rows the
    // queue marked done), and the relay has published everything.
    assert_eq!(
        running.stack().inbox_count("inventory").await.unwrap(),
        Some(99)
    );
    assert_eq!(running.stack().outbox_pending().await.unwrap(), Some(0));
    running.shutdown().await;
    assert_eq!(applied().await, (99, 99), "each good order applied once");
    // Every delivery went through the queue in the database, acknowledged once stored.
    let stored: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}inbox_queue WHERE consumer = 'inventory'",
        store.prefix()
    ))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(stored, 100);
    assert_eq!(stats.applied, 99, "{stats:?}");
    let parked = parking.search(&ParkingFilter::default(), 10).await.unwrap();
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].error_code, "constraint_violation");
}
