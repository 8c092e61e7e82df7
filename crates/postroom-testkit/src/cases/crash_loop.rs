//! A store's table queue against a consumer that dies: a handler slower than its lease is
//! refused when the consumer is built, and a message that kills its consumer on every
//! delivery is parked as a crash loop once its delivery count reaches the bound.
//!
//! The consumer processes are the calling test binary, re-run with the crash-loop test as
//! the only test and the store's address in the environment; their handler exits the
//! process. The calling test must therefore be named [`CRASH_LOOP_TEST`].

use super::order;
use crate::table_queue::TableQueueFixture;
use async_trait::async_trait;
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::outcome::codes;
use postroom_core::{
    EnvelopeDecoder, ErrorKind, Handled, Handler, HandlerError, Incoming, OutgoingMessage,
    Subscription,
};
use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The name of the test that calls
/// [`a_message_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop`]: its consumer
/// processes re-run it.
pub const CRASH_LOOP_TEST: &str =
    "a_message_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop";

/// Set in a consumer process: the address of the store it consumes from.
const CHILD_STORE: &str = "POSTROOM_CRASH_LOOP_STORE";
const LEASE: Duration = Duration::from_secs(1);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
const MAX_DELIVERIES: u32 = 3;

fn consumer_config() -> ConsumerConfig {
    let mut cfg = ConsumerConfig::new(
        "crashy",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.handler_timeout = Duration::from_millis(500);
    cfg.max_deliveries = MAX_DELIVERIES;
    cfg.version = "crash-1".into();
    cfg
}

/// A handler that takes its process down, as a segfault or an OOM kill would.
struct ExitsTheProcess;

#[async_trait]
impl Handler for ExitsTheProcess {
    async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
        std::process::exit(9)
    }
}

/// A consumer whose handler timeout is not shorter than the queue's lease is refused: by
/// the check against the transport, and, built without it, when it subscribes.
pub async fn a_handler_slower_than_its_lease_is_refused_at_start_up<S: TableQueueFixture>(
    store: &S,
) {
    let queue = store.queue(LEASE, POLL_INTERVAL);
    let mut cfg = consumer_config();
    cfg.handler_timeout = LEASE;
    let err = Consumer::for_transport(
        cfg.clone(),
        Arc::new(ExitsTheProcess),
        &queue.capabilities(),
    )
    .err()
    .expect("a lease not longer than the handler timeout is refused");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("handler timeout"), "{err}");
    // A consumer built without the check is refused when it subscribes.
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let err = Consumer::new(cfg, Arc::new(ExitsTheProcess))
        .run_on(&*queue, &Subscription::new("crashy", &["order.*"]), rx)
        .await
        .expect_err("refused at start-up");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
}

fn spawn_consumer(address: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            CRASH_LOOP_TEST,
            "--exact",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_STORE, address)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn a consumer process")
}

/// A consumer process: runs until its handler exits it, or until killed.
async fn consumer_process<S: TableQueueFixture>(address: String) {
    let queue = S::queue_at(&address, LEASE, POLL_INTERVAL).await;
    let consumer = Consumer::for_transport(
        consumer_config(),
        Arc::new(ExitsTheProcess),
        &queue.capabilities(),
    )
    .unwrap();
    let (_never, rx) = tokio::sync::watch::channel(false);
    consumer
        .run_on(&*queue, &Subscription::new("crashy", &["order.*"]), rx)
        .await
        .unwrap();
}

/// A message that kills its consumer process on every delivery is parked as a crash loop,
/// with the consumer's diagnostics, once its delivery count reaches the bound; nothing of
/// it is left in the queue. `fresh` makes the store (it is not awaited in a consumer
/// process). Call it from a test named [`CRASH_LOOP_TEST`].
pub async fn a_message_that_kills_its_consumer_every_time_is_parked_as_a_crash_loop<S>(
    fresh: impl Future<Output = S>,
) where
    S: TableQueueFixture,
{
    if let Ok(address) = std::env::var(CHILD_STORE) {
        consumer_process::<S>(address).await;
        return;
    }
    let store = fresh.await;
    let queue = store.queue(LEASE, POLL_INTERVAL);
    queue
        .bind(&Subscription::new("crashy", &["order.*"]))
        .await
        .unwrap();
    let env = order("boom", 1);
    queue
        .publisher()
        .publish(&OutgoingMessage::from_envelope(&env, "order.created"))
        .await
        .unwrap();
    let parking = store.parking();

    let (mut crashes, mut spawned) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while parking.get(env.id).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "not parked within 60 s");
        assert!(
            spawned < 2 * MAX_DELIVERIES,
            "never parked after {spawned} consumer processes"
        );
        let mut child = spawn_consumer(&store.address());
        spawned += 1;
        // Either the handler takes the process down, or the process parks the message.
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert_eq!(status.code(), Some(9), "the handler exited the process");
                crashes += 1;
                break;
            }
            if !parking.get(env.id).await.unwrap().is_empty() {
                child.kill().unwrap();
                let _ = child.wait();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let parked = parking.get(env.id).await.unwrap();
    assert_eq!(parked.len(), 1);
    let p = &parked[0];
    assert_eq!(p.error_code, codes::CRASH_LOOP);
    assert!(
        p.error_message
            .contains(&format!("delivered {MAX_DELIVERIES} times")),
        "{}",
        p.error_message
    );
    assert_eq!(
        p.consumer_version, "crash-1",
        "parked with the consumer's diagnostics"
    );
    assert_eq!(p.message_type.as_deref(), Some("order.created"));
    assert_eq!(
        crashes,
        MAX_DELIVERIES - 1,
        "handled on every delivery below the bound"
    );
    // Parking removes the queue row in the same transaction.
    assert_eq!(
        queue.backlog("crashy").await.unwrap(),
        Default::default(),
        "parked, not left in the queue"
    );
}
