//! What the facade promised and did not keep, each against real servers: a started service
//! that runs nothing is running until it is shut down; a driver's error keeps its kind on the
//! way to the application; a copy SQS dead-letters by itself keeps its last error when
//! another service (a restart) ingests it; a service says how many messages a consumer's
//! inbox holds and whether its relay has published everything.

use postroom::{
    Contract, ErrorClass, ErrorKind, Handled, HandlerError, Message, Service, TypedHandler,
    async_trait, consumer,
};
use postroom_core::driver::TopologyFile;
use postroom_core::{ParkingFilter, ParkingStore, Subscriber};
use postroom_testkit::cases::publish_to;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_started_service_that_runs_neither_consumer_nor_relay_is_running_until_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("idle.db");
    let running = Service::builder()
        .database(db.to_str().unwrap())
        .open()
        .await
        .unwrap()
        .start()
        .await
        .unwrap();
    assert!(
        running.is_running(),
        "a service is running from start() until shutdown(), whatever it runs"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn a_drivers_permanent_error_reaches_the_application_with_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("not-a-database.db");
    // A file that is not a SQLite database: SQLite's NOTADB, invalid data (permanent).
    std::fs::write(&db, vec![0x5a_u8; 8192]).unwrap();
    let err = Service::builder()
        .database(db.to_str().unwrap())
        .open()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    assert_eq!(err.class(), ErrorClass::Permanent, "{err}");
}

#[derive(serde::Serialize, serde::Deserialize)]
struct OrderCreated {
    order_id: String,
}

impl Contract for OrderCreated {
    const TYPE: &'static str = "order.created";
}

/// Fails every delivery with a transient error whose text the parked copy must keep.
struct DatabaseDown {
    calls: Arc<AtomicU32>,
}

#[async_trait]
impl TypedHandler<OrderCreated> for DatabaseDown {
    async fn handle(&self, _m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(HandlerError::transient(
            "db_down",
            "inventory database down: connection refused (test 7fa3)",
        ))
    }
}

fn sqs_url() -> String {
    let http =
        std::env::var("POSTROOM_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:5000".into());
    let (scheme, rest) = http.split_once("://").expect("a URL");
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    format!("sqs://{rest}?region={region}&tls={}", scheme == "https")
}

fn topology(prefix: &str) -> TopologyFile {
    // Three receives, then SQS moves the copy to the DLQ by itself at the fourth. A receive
    // hides a copy for 2 s (no heartbeat), so a copy received and never settled (its process
    // died) is received again 2 s later.
    TopologyFile::parse(&format!(
        "prefix = \"{prefix}\"\nladder = \"1s,5s,5s\"\nmax_receive_count = 3\n\
         visibility_timeout = \"2s\"\nextend_visibility = false\n\
         [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\"]\n"
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_sqs_moved_by_itself_keeps_its_last_error_when_another_service_ingests_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.db");
    let prefix = format!("fd-{}", postroom_testkit::servers::suffix());
    // The first service: its consumer fails the message twice, then stops.
    let calls = Arc::new(AtomicU32::new(0));
    let first = Service::builder()
        .database(db.to_str().unwrap())
        .broker(&sqs_url())
        .topology(topology(&prefix))
        .retry(
            postroom::RetryPolicy::default()
                .ladder("1s,5s,5s".parse().unwrap())
                .retries(5),
        )
        .open()
        .await
        .unwrap()
        .consumer(
            consumer::<OrderCreated>(
                "inventory",
                DatabaseDown {
                    calls: calls.clone(),
                },
            )
            // Within the 2 s a receive hides a copy for.
            .handler_timeout(Duration::from_secs(1)),
        )
        .start()
        .await
        .unwrap();
    let env = postroom::Envelope::builder(OrderCreated::TYPE, "shop")
        .data(serde_json::json!({"order_id": "o-1"}))
        .build();
    publish_to(first.transport().publisher(), &env, OrderCreated::TYPE).await;
    let end = Instant::now() + Duration::from_secs(30);
    while calls.load(Ordering::SeqCst) < 2 && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "failed on two receives");
    first.shutdown().await;

    // The second service (a restart: a transport that never saw the failures) runs only the
    // parking ingest of the consumer; a receive on the work queue makes SQS move the copy.
    let second = Service::builder()
        .database(db.to_str().unwrap())
        .broker(&sqs_url())
        .topology(topology(&prefix))
        .open()
        .await
        .unwrap();
    let parking: Arc<dyn ParkingStore> = second.opened_store().unwrap().parking();
    let second = second.ingest_parked().start().await.unwrap();
    let mut work = second
        .stack()
        .subscribe("inventory", &["order.created"], 1)
        .await
        .unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    let mut parked = Vec::new();
    let mut received = 0;
    while parked.is_empty() && Instant::now() < end {
        // The third receive is taken and never settled, as by a process that died handling
        // it: no postroom consumer records anything for it, and SQS moves the copy itself at
        // the fourth.
        if let Some(d) = work.next(Duration::from_millis(1000)).await.unwrap() {
            received += 1;
            drop(d);
        }
        parked = parking.search(&ParkingFilter::default(), 10).await.unwrap();
    }
    assert!(
        received <= 1,
        "received {received} times after the consumer stopped"
    );
    postroom_core::Subscriber::close(&mut work).await;
    second.shutdown().await;
    assert_eq!(parked.len(), 1, "the copy SQS moved was parked");
    let p = &parked[0];
    assert_eq!(p.message_id, env.id);
    assert!(
        p.error_message.contains("test 7fa3"),
        "the parked copy keeps the consumer's last error, got {:?}: {:?}",
        p.error_code,
        p.error_message
    );
}

/// Applies each order once through the SQLite inbox.
struct Reserve {
    store: postroom::sqlite::SqliteStore,
}

#[async_trait]
impl TypedHandler<OrderCreated> for Reserve {
    async fn handle(&self, m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
        let mut tx = self.store.begin().await?;
        if !postroom::sqlite::inbox::claim(&mut tx, "inventory", m.id()).await? {
            return Ok(Handled::Duplicate);
        }
        tx.commit().await?;
        Ok(Handled::Applied)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_says_what_its_inbox_holds_and_what_its_relay_has_left() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.db");
    let service = Service::builder()
        .database(db.to_str().unwrap())
        .open()
        .await
        .unwrap();
    let store = service
        .store::<postroom::sqlite::SqliteStore>()
        .unwrap()
        .clone();
    let mut tx = store.begin().await.unwrap();
    for n in 0..3 {
        let env = postroom::Envelope::builder(OrderCreated::TYPE, "shop")
            .aggregate("order", format!("o-{n}"), 1)
            .data(serde_json::json!({"order_id": format!("o-{n}")}))
            .build();
        let msg = postroom::OutgoingMessage::from_envelope(&env, OrderCreated::TYPE);
        postroom::sqlite::outbox::enqueue(&mut tx, &msg)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    // Written, not yet relayed: three rows left, an empty inbox.
    let idle = Service::builder()
        .database(db.to_str().unwrap())
        .open()
        .await
        .unwrap()
        .start()
        .await
        .unwrap();
    assert_eq!(idle.stack().outbox_pending().await.unwrap(), Some(3));
    assert_eq!(
        idle.stack().inbox_count("inventory").await.unwrap(),
        Some(0)
    );
    idle.shutdown().await;

    let running = service
        .consumer(consumer::<OrderCreated>(
            "inventory",
            Reserve {
                store: store.clone(),
            },
        ))
        .relay()
        .start()
        .await
        .unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    while running.stats("inventory").unwrap().applied < 3 && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(running.stack().outbox_pending().await.unwrap(), Some(0));
    assert_eq!(
        running.stack().inbox_count("inventory").await.unwrap(),
        Some(3)
    );
    assert_eq!(
        running.stack().inbox_count("billing").await.unwrap(),
        Some(0),
        "a consumer that applied nothing holds nothing"
    );
    running.shutdown().await;
}
