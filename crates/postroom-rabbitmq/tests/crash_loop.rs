//! A message that kills its consumer before it settles, on every delivery, ends in the parking
//! lot with its diagnostics — in both retry styles. The consumer processes are this test
//! binary, re-run with one test selected and the workload in the environment; their handler
//! exits the process.
//!
//! What RabbitMQ 3.10 does, observed here: a quorum queue counts returns of a copy in
//! `x-delivery-count`; a copy dead-lettered out of the work queue (reject+DLX: into the delay
//! stage) comes back as a new copy whose count starts again from nothing, so the count bounds
//! the crashes of one pass through the work queue. The consumer parks on the last delivery the
//! broker will make before its own delivery limit fires (delivery-limit + 1), with its
//! diagnostics; left to the broker, the limit would dead-letter the copy into the stage (in
//! reject+DLX) and round again without ever reaching the parking lot.

mod common;

use common::TestRabbit;
use common::probe::{Mode, Probe};
use postroom_core::outcome::codes;
use postroom_core::{
    Consumer, ConsumerConfig, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming,
    ParkedMessage, ParkingFilter, ParkingStore, Redriver, RetryPolicy, Subscription, Transport,
    async_trait,
};
use postroom_rabbitmq::{Broker, RabbitTransport, RetryStyle, TopologyConfig};
use postroom_testkit::cases::crash_loop;
use postroom_testkit::cases::publish_to;
use postroom_testkit::child::this_test_again;
use std::io::Write;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

const CHILD_PREFIX: &str = "POSTROOM_CRASH_PREFIX";
const CHILD_STYLE: &str = "POSTROOM_CRASH_STYLE";
const CHILD_LOG: &str = "POSTROOM_CRASH_LOG";
const DELIVERY_LIMIT: u32 = 3;

fn config(prefix: &str, style: RetryStyle) -> TopologyConfig {
    TopologyConfig {
        prefix: prefix.into(),
        exchange: format!("{prefix}.orders"),
        ladder: "1s".parse().unwrap(),
        retry_style: style,
        delivery_limit: DELIVERY_LIMIT,
        ..TopologyConfig::default()
    }
    .with_consumer("crashy", &["order.created"])
}

/// Writes what each delivery looked like (x-delivery-count, attempt) to the log, then: the
/// first delivery exits the process; the second (its first redelivery) fails transiently (a
/// reject+DLX round through the stage, an ack+publish retry); every later delivery exits the
/// process again.
struct CrashingHandler {
    log: std::path::PathBuf,
}

#[async_trait]
impl Handler for CrashingHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let count = m
            .headers
            .get("x-delivery-count")
            .cloned()
            .unwrap_or_default();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        writeln!(f, "attempt={} x-delivery-count={count}", m.attempt).unwrap();
        f.sync_all().unwrap();
        if m.attempt == 0 && count == "1" {
            return Err(HandlerError::transient(
                "dependency_down",
                "first pass fails",
            ));
        }
        std::process::exit(9)
    }
}

async fn consumer_process(prefix: String, style: RetryStyle, log: String) {
    let broker = Broker::connect(&common::amqp_url()).await.unwrap();
    let transport = RabbitTransport::new(broker, config(&prefix, style), None).unwrap();
    let mut cfg = ConsumerConfig::new(
        "crashy",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.version = "crash-1".into();
    cfg.retry = RetryPolicy {
        ladder: "1s".parse().unwrap(),
        max_retries: 5,
        max_unknown_retries: 1,
        max_age: None,
        jitter: 0.0,
    };
    cfg.breaker.failure_threshold = 0;
    let consumer = Consumer::for_transport(
        cfg,
        Arc::new(CrashingHandler { log: log.into() }),
        &transport.capabilities(),
    )
    .unwrap();
    let (_never, rx) = tokio::sync::watch::channel(false);
    consumer
        .run_on(
            &transport,
            &Subscription::new("crashy", &["order.created"]).prefetch(1),
            rx,
        )
        .await
        .unwrap();
}

fn spawn_consumer(test: &str, prefix: &str, style: &str, log: &std::path::Path) -> Child {
    this_test_again(test)
        .env(CHILD_PREFIX, prefix)
        .env(CHILD_STYLE, style)
        .env(CHILD_LOG, log)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn a consumer process")
}

async fn parked(t: &TestRabbit, store: &Arc<postroom_sqlite::SqliteStore>) -> Vec<ParkedMessage> {
    t.ingest("crashy", store.clone(), Duration::from_millis(200))
        .await
        .expect("ingest");
    store.search(&ParkingFilter::default(), 10).await.unwrap()
}

/// Publish one message, then start consumer processes one after another until the message
/// is parked; returns the parking and the log of deliveries.
async fn crash_until_parked(
    test: &str,
    style: RetryStyle,
) -> (
    TestRabbit,
    Arc<postroom_sqlite::SqliteStore>,
    tempfile::TempDir,
    ParkedMessage,
    Vec<String>,
    u32,
) {
    let t = TestRabbit::new("1s").await;
    t.configure(|c| *c = config(&t.prefix, style));
    t.topology().apply().await.expect("apply topology");
    let (store, dir) = common::sqlite().await;
    let log = dir.path().join("deliveries.log");
    let env = common::order("boom", 1);
    publish_to(t.publisher(), &env, "order.created").await;
    let run = crash_loop::crash_until_parked(
        || spawn_consumer(test, &t.prefix, style_name(style), &log),
        || async { !parked(&t, &store).await.is_empty() },
        |status| status.code() == Some(9),
        4 * DELIVERY_LIMIT,
        Duration::from_secs(90),
    )
    .await;
    let crashes = run.crashes;
    drop(run);
    let found = parked(&t, &store).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].message_id, env.id);
    let lines = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    (
        t,
        store,
        dir,
        found.into_iter().next().unwrap(),
        lines,
        crashes,
    )
}

/// Once the consumer is mended, an operator redrives the crash-looped message: it is handled,
/// not parked again at once (its redriven copy must not carry the old delivery count).
async fn redrive_to_a_mended_consumer(
    t: &TestRabbit,
    store: &Arc<postroom_sqlite::SqliteStore>,
    p: &ParkedMessage,
) {
    let redriver = Redriver::new(store.clone(), t.publisher());
    let run = redriver
        .start(&ParkingFilter::default(), 10, "test")
        .await
        .unwrap();
    assert_eq!(run.total, 1);
    redriver.execute(&run.id, 10.0, |_| {}).await.unwrap();
    let transport = Arc::new(t.transport());
    let probe = Probe::new(Mode::Ok);
    let mut cfg = ConsumerConfig::new(
        "crashy",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.version = "mended-2".into();
    cfg.retry = RetryPolicy::with_ladder("1s".parse().unwrap());
    let consumer = Consumer::for_transport(cfg, probe.clone(), &transport.capabilities()).unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = common::spawn_on_transport(
        consumer,
        &transport,
        Subscription::new("crashy", &["order.created"]),
        rx,
    );
    let handled = probe
        .handled_within(p.message_id, Duration::from_secs(20))
        .await;
    let again = parked(t, store).await;
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    assert!(
        handled,
        "the redriven message was never handled; parked again: {:?}",
        again
            .iter()
            .map(|p| (&p.error_code, &p.error_message))
            .collect::<Vec<_>>()
    );
    assert!(again.is_empty(), "parked again: {again:?}");
}

/// How a consumer process is told `style` (read back by [`child_args`]).
fn style_name(style: RetryStyle) -> &'static str {
    match style {
        RetryStyle::RejectDlx => "reject_dlx",
        RetryStyle::AckPublish => "ack_publish",
    }
}

fn child_args() -> Option<(String, RetryStyle, String)> {
    let prefix = std::env::var(CHILD_PREFIX).ok()?;
    let style = match std::env::var(CHILD_STYLE).ok()?.as_str() {
        "reject_dlx" => RetryStyle::RejectDlx,
        _ => RetryStyle::AckPublish,
    };
    Some((prefix, style, std::env::var(CHILD_LOG).ok()?))
}

fn check(p: &ParkedMessage, lines: &[String], crashes: u32) {
    eprintln!(
        "deliveries seen by the handler: {lines:#?}; {crashes} crashes; parked: {} {}",
        p.error_code, p.error_message
    );
    assert_eq!(p.error_code, codes::CRASH_LOOP, "{p:?}");
    assert_eq!(p.consumer, "crashy");
    assert_eq!(
        p.consumer_version, "crash-1",
        "parked with the consumer's diagnostics"
    );
    assert_eq!(p.message_type.as_deref(), Some("order.created"));
    assert!(
        p.error_message.contains("without being settled"),
        "{}",
        p.error_message
    );
    // A crash and a transient failure in the first pass; in the second pass the count starts
    // again, and each delivery below the bound (delivery-limit + 1 = 4) crashes: parked on
    // the 4th delivery of that pass.
    assert_eq!(lines.len(), 2 + DELIVERY_LIMIT as usize, "{lines:?}");
    assert_eq!(crashes, 1 + DELIVERY_LIMIT);
}

/// The case in one retry style, as the test named `test` (which its consumer processes run
/// again): kill the consumer on every delivery until the message is parked, check the parking
/// (two attempts, the first pass being `first_pass`), then redrive it to a mended consumer. In
/// a consumer process, run the crashing consumer instead.
async fn killed_on_every_delivery(test: &str, style: RetryStyle, first_pass: &str) {
    if let Some((prefix, child_style, log)) = child_args() {
        return consumer_process(prefix, child_style, log).await;
    }
    let (t, store, _dir, p, lines, crashes) = crash_until_parked(test, style).await;
    check(&p, &lines, crashes);
    assert_eq!(p.attempts, 2, "{first_pass}");
    redrive_to_a_mended_consumer(&t, &store, &p).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_dlx_a_consumer_killed_on_every_delivery_ends_parked_with_diagnostics() {
    killed_on_every_delivery(
        "reject_dlx_a_consumer_killed_on_every_delivery_ends_parked_with_diagnostics",
        RetryStyle::RejectDlx,
        "one reject+DLX round before the crashes",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_publish_a_consumer_killed_on_every_delivery_ends_parked_with_diagnostics() {
    killed_on_every_delivery(
        "ack_publish_a_consumer_killed_on_every_delivery_ends_parked_with_diagnostics",
        RetryStyle::AckPublish,
        "one retry before the crashes",
    )
    .await;
}
