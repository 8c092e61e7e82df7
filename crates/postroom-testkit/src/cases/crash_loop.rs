//! A store's table queue against a consumer that dies: a handler slower than its lease is
//! refused when the consumer is built, and a message that kills its consumer on every
//! delivery is parked as a crash loop once its delivery count reaches the bound.
//!
//! The consumer processes are the calling test binary, re-run with the crash-loop test as
//! the only test and the store's address in the environment; their handler exits the
//! process. The calling test must therefore be named [`CRASH_LOOP_TEST`].

use super::order;
use crate::cases::publish_to;
use crate::table_queue::TableQueueFixture;
use async_trait::async_trait;
use postroom_core::ParkedMessage;
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::outcome::codes;
use postroom_core::{
    EnvelopeDecoder, ErrorKind, Handled, Handler, HandlerError, Incoming, Subscription,
};
use std::future::Future;
use std::process::{Child, ExitStatus, Stdio};
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
    crate::child::this_test_again(CRASH_LOOP_TEST)
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
    publish_to(queue.publisher(), &env, "order.created").await;
    let parking = store.parking();

    let run = crash_until_parked(
        || spawn_consumer(&store.address()),
        || async { !parking.get(env.id).await.unwrap().is_empty() },
        |status| status.code() == Some(9),
        2 * MAX_DELIVERIES,
        Duration::from_secs(60),
    )
    .await;
    let crashes = run.crashes;
    drop(run);
    let parked = parking.get(env.id).await.unwrap();
    assert_eq!(parked.len(), 1);
    let p = &parked[0];
    assert_parked_as_crash_loop(p, MAX_DELIVERIES, "crash-1");
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

/// A crash-loop run: how many consumer processes the poison took down, and the process that
/// was running when the poison was found parked (killed on drop), if one was.
#[derive(Debug)]
pub struct CrashLoop {
    /// Processes that died of the handler.
    pub crashes: u32,
    /// The process running when the poison was found parked (it parked it, or its broker did).
    pub survivor: Option<Child>,
}

impl Drop for CrashLoop {
    fn drop(&mut self) {
        if let Some(mut child) = self.survivor.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Start consumer processes with `spawn`, one after another, until `parked` says the poison
/// is parked: each must either die of its handler (`died_of_handler` says so of its exit
/// status) or be running when the poison is found parked. Fails the test after
/// `max_processes` processes or `within`.
pub async fn crash_until_parked<P, F>(
    mut spawn: impl FnMut() -> Child,
    mut parked: P,
    died_of_handler: impl Fn(&ExitStatus) -> bool,
    max_processes: u32,
    within: Duration,
) -> CrashLoop
where
    P: FnMut() -> F,
    F: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    // The running process lives in `run`, so a failed assertion below kills it on the way out.
    let mut run = CrashLoop {
        crashes: 0,
        survivor: None,
    };
    let mut spawned = 0;
    loop {
        if parked().await {
            return run;
        }
        assert!(
            spawned < max_processes,
            "never parked after {spawned} consumer processes"
        );
        let child = run.survivor.insert(spawn());
        spawned += 1;
        // Either the handler takes the process down, or the poison is parked meanwhile.
        loop {
            assert!(Instant::now() < deadline, "not parked within {within:?}");
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    died_of_handler(&status),
                    "the handler took the process down ({status})"
                );
                run.crashes += 1;
                break;
            }
            if parked().await {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        run.survivor = None;
    }
}

/// `p` was parked as a crash loop after `deliveries` deliveries, with the diagnostics of the
/// consumer version `version`.
pub fn assert_parked_as_crash_loop(p: &ParkedMessage, deliveries: u32, version: &str) {
    assert_eq!(p.error_code, codes::CRASH_LOOP, "{p:?}");
    assert!(
        p.error_message
            .contains(&format!("delivered {deliveries} times")),
        "{}",
        p.error_message
    );
    assert_eq!(
        p.consumer_version, version,
        "parked with the consumer's diagnostics"
    );
}
