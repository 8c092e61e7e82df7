//! The service builder against real servers: services wired from URLs (SQLite; PostgreSQL +
//! RabbitMQ), the retry ladder declared once and checked at start, a producer service and a
//! consumer service applying each message exactly once, and a shutdown that drains.

use postroom::{
    Contract, Envelope, ErrorKind, Handled, HandlerError, Message, OutgoingMessage, RetryPolicy,
    Service, TypedHandler, async_trait, consumer,
};
use postroom_testkit::servers::{TestDb, suffix};
use postroom_testkit::wait::eventually;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Serialize, Deserialize)]
struct OrderCreated {
    order_id: String,
    qty: i64,
}

impl Contract for OrderCreated {
    const TYPE: &'static str = "order.created";
}

fn envelope(order_id: &str, qty: i64) -> (Envelope, OutgoingMessage) {
    let env = Envelope::builder(OrderCreated::TYPE, "tests")
        .aggregate("order", order_id, 1)
        .data(
            serde_json::to_value(OrderCreated {
                order_id: order_id.into(),
                qty,
            })
            .unwrap(),
        )
        .build();
    let msg = OutgoingMessage::from_envelope(&env, OrderCreated::TYPE);
    (env, msg)
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

impl BrokerNames {
    fn new() -> Self {
        Self(format!("prf-{}", suffix()))
    }
}

impl Drop for BrokerNames {
    fn drop(&mut self) {
        let prefix = format!("{}.", self.0);
        postroom_testkit::servers::clean_up(async move {
            let api = postroom_rabbitmq::ManagementApi::new(&rabbit_api(), "/").unwrap();
            let _ = api.delete_everything_named(&prefix).await;
        });
    }
}

/// A service opened on the test's PostgreSQL database and RabbitMQ, its broker names those of
/// `names`, with the retry ladder `1s` and three retries.
async fn open_on_postgres_and_rabbitmq(db: &TestDb, names: &BrokerNames) -> Service {
    Service::builder()
        .database(&db.url)
        .broker(&amqp())
        .prefix(&names.0)
        .retry(
            RetryPolicy::default()
                .ladder("1s".parse().unwrap())
                .retries(3),
        )
        .open()
        .await
        .expect("open a service on PostgreSQL and RabbitMQ")
}

/// The PostgreSQL store `service` opened, for the test's own tables and its handlers.
fn pg_store(service: &Service) -> postroom_postgres::PgStore {
    service
        .store::<postroom_postgres::PgStore>()
        .expect("PostgreSQL")
        .clone()
}

/// Reserves on PostgreSQL through the inbox; the first delivery of `flaky` fails transiently.
struct PgReserve {
    store: postroom_postgres::PgStore,
    flaky: String,
}

#[async_trait]
impl TypedHandler<OrderCreated> for PgReserve {
    async fn handle(&self, m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
        if m.attempt == 0 && m.data.order_id == self.flaky {
            return Err(HandlerError::transient("down", "stock service down"));
        }
        let mut tx = self.store.begin().await?;
        if !postroom_postgres::inbox::claim(&mut tx, self.store.prefix(), "inventory", m.id())
            .await?
        {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO reservations (order_id, qty) VALUES ($1, $2)")
            .bind(&m.data.order_id)
            .bind(m.data.qty)
            .execute(&mut *tx)
            .await?;
        postroom_postgres::commit(tx).await?;
        Ok(Handled::Applied)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_ladder_the_broker_has_no_stage_for_is_refused_at_start_naming_both() {
    let db = TestDb::create().await;
    let names = BrokerNames::new();
    let service = open_on_postgres_and_rabbitmq(&db, &names).await;
    let reserve = PgReserve {
        store: pg_store(&service),
        flaky: String::new(),
    };
    // The consumer states a ladder of its own (the default 5s,30s,5m) that the broker's
    // stages, made from the service's ladder, do not have.
    let err = service
        .consumer(consumer::<OrderCreated>("inventory", reserve).retry(RetryPolicy::default()))
        .start()
        .await
        .expect_err("a ladder the broker cannot keep is refused");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("5s,30s,5m") && text.contains("stages: 1s") && text.contains("inventory"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_consumer_services_on_postgres_and_rabbitmq_apply_each_message_once() {
    let db = TestDb::create().await;
    let names = BrokerNames::new();

    // The producer's service: the relay, and the consumer's binding kept from the start.
    let producer = open_on_postgres_and_rabbitmq(&db, &names).await;
    let store = pg_store(&producer);
    sqlx::query("CREATE TABLE reservations (order_id TEXT NOT NULL, qty BIGINT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let producer = producer
        .bind_for("inventory", &[OrderCreated::TYPE])
        .relay()
        .start()
        .await
        .expect("start producer");

    // The consumer's service, as another process would run it.
    let consumer_service = open_on_postgres_and_rabbitmq(&db, &names).await;
    let consumer_store = pg_store(&consumer_service);
    let consumer_running = consumer_service
        .consumer(consumer::<OrderCreated>(
            "inventory",
            PgReserve {
                store: consumer_store,
                flaky: "o-3".into(),
            },
        ))
        .start()
        .await
        .expect("start consumer");
    assert_eq!(consumer_running.consumer_names(), vec!["inventory"]);

    for i in 1..=20 {
        let (_, msg) = envelope(&format!("o-{i}"), i);
        let mut tx = store.begin().await.unwrap();
        postroom_postgres::outbox::enqueue(&mut tx, store.prefix(), &msg)
            .await
            .unwrap();
        postroom_postgres::commit(tx).await.unwrap();
    }
    let pool = store.pool().clone();
    let count = || {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (i64, i64, i64)>(
                "SELECT count(*), count(DISTINCT order_id), coalesce(sum(qty), 0)::BIGINT FROM reservations",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!(
        eventually(Duration::from_secs(30), || async { count().await.0 >= 20 }).await,
        "every order reserved; got {:?}",
        count().await
    );
    let stats = consumer_running.stats("inventory").unwrap();
    assert!(consumer_running.is_running() && producer.is_running());
    consumer_running.shutdown().await;
    producer.shutdown().await;
    assert_eq!(
        count().await,
        (20, 20, 210),
        "each order applied exactly once"
    );
    assert_eq!(
        stats.retries_by_stage.get(&0),
        Some(&1),
        "o-3 retried once through the 1s stage made from the declared ladder: {stats:?}"
    );
    assert!(stats.parked_by_code.is_empty(), "{stats:?}");
}

/// Holds its first call until released.
struct Gate {
    store: postroom_sqlite::SqliteStore,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

#[async_trait]
impl TypedHandler<OrderCreated> for Gate {
    async fn handle(&self, m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
        self.entered.notify_one();
        self.release.notified().await;
        let mut tx = self.store.begin().await?;
        if !postroom_sqlite::inbox::claim(&mut tx, "inventory", m.id()).await? {
            return Ok(Handled::Duplicate);
        }
        sqlx::query("INSERT INTO reservations (order_id) VALUES (?)")
            .bind(&m.data.order_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Handled::Applied)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_handler_in_flight_and_settles_its_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let service = Service::builder()
        .database(path.to_str().unwrap())
        .retry(RetryPolicy::default().ladder("1s".parse().unwrap()))
        .open()
        .await
        .expect("open");
    let store = service
        .store::<postroom_sqlite::SqliteStore>()
        .expect("SQLite")
        .clone();
    sqlx::query("CREATE TABLE reservations (order_id TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let running = service
        .consumer(consumer::<OrderCreated>(
            "inventory",
            Gate {
                store: store.clone(),
                entered: entered.clone(),
                release: release.clone(),
            },
        ))
        .relay()
        .start()
        .await
        .expect("start");
    let (_, msg) = envelope("o-1", 1);
    let mut tx = store.begin().await.unwrap();
    postroom_sqlite::outbox::enqueue(&mut tx, &msg)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), entered.notified())
        .await
        .expect("the handler was called");

    let shutdown = tokio::spawn(running.shutdown());
    // The shutdown waits for the handler: it is still going while the handler is held.
    tokio::task::yield_now().await;
    assert!(
        !shutdown.is_finished(),
        "shutdown returned with a handler in flight"
    );
    release.notify_one();
    tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .expect("shutdown returns once the handler settled")
        .unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM reservations")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM postroom_queue WHERE consumer = 'inventory'")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(
        (applied, left),
        (1, 0),
        "applied once and acked before shutdown returned"
    );
}

#[tokio::test]
async fn a_service_without_a_transport_or_with_two_sources_is_a_clear_error() {
    let err = Service::builder().open().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("needs a transport"), "{err}");
    let err = Service::builder()
        .database("x.db")
        .broker("mqtt://127.0.0.1:1883")
        .open()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unsupported"), "{err}");
}
