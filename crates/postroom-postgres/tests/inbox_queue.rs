//! Inbox-queue mode: persist-then-ack ingest, N workers in parallel, retries with the
//! error recorded, parking, and ordered processing across a gap.

mod common;

use chrono::{DateTime, Utc};
use postroom_core::{
    Envelope, Handled, Handler, HandlerError, Incoming, MessageId, OutgoingMessage, ParkingFilter,
    ParkingStore, Publisher, ReceivedMessage, RetryLadder, RetryPolicy, async_trait,
};
use postroom_postgres::{InboxQueue, InboxQueueConfig, OrderedMode, PgQueue, PgStore, TablePrefix};
use postroom_testkit::running::{inbox_queue_config, spawn_ingest, spawn_workers};
use postroom_testkit::servers::TestDb;
use postroom_testkit::wait::eventually;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// One handler call: id, aggregate id, version, attempt, when (on this process's monotonic
/// clock and on the wall clock, the one PostgreSQL's `now()` reads on this machine).
type Call = (MessageId, String, u64, u32, Instant, DateTime<Utc>);

#[derive(Default)]
struct Recorder {
    sleep: Duration,
    /// Hold each call until this many handlers have run at once (or 30 s passed since the
    /// first call), so the overlap does not depend on how fast the workers are fed.
    hold_until: usize,
    first_call: std::sync::OnceLock<Instant>,
    fail: AtomicBool,
    running: AtomicUsize,
    max_running: AtomicUsize,
    calls: Mutex<Vec<Call>>,
}

#[async_trait]
impl Handler for Recorder {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let e = &m.envelope;
        self.calls.lock().unwrap().push((
            e.id,
            e.aggregate.id.clone(),
            e.aggregate.version,
            m.attempt,
            Instant::now(),
            Utc::now(),
        ));
        let first = *self.first_call.get_or_init(Instant::now);
        while self.max_running.load(Ordering::SeqCst) < self.hold_until
            && first.elapsed() < Duration::from_secs(30)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(self.sleep).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(HandlerError::transient("dependency_down", "injected"));
        }
        Ok(Handled::Applied)
    }
}

impl Recorder {
    fn versions_of(&self, agg: &str) -> Vec<u64> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.1 == agg)
            .map(|c| c.2)
            .collect()
    }
    fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

async fn setup(
    consumer: &str,
    tweak: impl FnOnce(&mut InboxQueueConfig),
) -> (TestDb, PgStore, InboxQueue) {
    let db = TestDb::create().await;
    let store = PgStore::from_pool(db.pool(12).await, TablePrefix::default());
    store.migrate().await.unwrap();
    let iq = InboxQueue::new(
        store.pool().clone(),
        store.prefix().clone(),
        config(consumer, tweak),
    )
    .unwrap();
    (db, store, iq)
}

fn config(consumer: &str, tweak: impl FnOnce(&mut InboxQueueConfig)) -> InboxQueueConfig {
    let mut cfg = inbox_queue_config(consumer);
    cfg.consumer.retry = RetryPolicy {
        jitter: 0.0,
        ..RetryPolicy::with_ladder(
            RetryLadder::new(vec![Duration::from_millis(200), Duration::from_millis(300)]).unwrap(),
        )
    };
    tweak(&mut cfg);
    cfg
}

/// Ordered mode on `workers` workers: a message waits up to `gap_wait` for a missing earlier
/// version of its aggregate, checking again every 30 ms.
fn ordered(workers: usize, gap_wait: Duration) -> impl FnOnce(&mut InboxQueueConfig) {
    move |c| {
        c.workers = workers;
        c.ordered = Some(OrderedMode {
            gap_wait,
            recheck: Duration::from_millis(30),
        });
    }
}

fn received(agg: &str, v: u64) -> ReceivedMessage {
    let env = Envelope::builder("order.created", "test")
        .aggregate("order", agg, v)
        .build();
    let m = OutgoingMessage::from_envelope(&env, "orders");
    ReceivedMessage::new(Some(m.id), "orders", m.headers, m.body)
}

/// The value of `column` in `msg`'s row of the inbox queue.
async fn queue_row_column<T>(store: &PgStore, msg: &ReceivedMessage, column: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    sqlx::query_scalar(&format!(
        "SELECT {column} FROM postroom_inbox_queue WHERE message_id = $1"
    ))
    .bind(msg.id.unwrap().as_uuid())
    .fetch_one(store.pool())
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_in_parallel_beyond_the_subscription() {
    let (_db, store, iq) = setup("par", |c| c.workers = 8).await;
    // Persist-then-ack from a PgQueue subscription with prefetch 1.
    let queue = store
        .queue(
            PgQueue::defaults()
                .prefetch(1)
                .poll_interval(Duration::from_millis(10)),
        )
        .unwrap();
    let sub = queue.subscribe("par", &["orders"]).await.unwrap();
    for i in 0..40 {
        let env = Envelope::builder("order.created", "test")
            .aggregate("order", format!("p{i}"), 1)
            .build();
        queue
            .publish(&OutgoingMessage::from_envelope(&env, "orders"))
            .await
            .unwrap();
    }
    let (stop, rx) = watch::channel(false);
    let ingest = spawn_ingest(&iq, sub, rx.clone());
    let h = Arc::new(Recorder {
        sleep: Duration::from_millis(20),
        hold_until: 8,
        ..Recorder::default()
    });
    let workers = spawn_workers(&iq, h.clone(), rx);
    assert!(
        eventually(Duration::from_secs(30), async || h.count() >= 40).await,
        "all 40 handled"
    );
    assert!(
        eventually(Duration::from_secs(5), async || h
            .running
            .load(Ordering::SeqCst)
            == 0)
        .await
    );
    let _ = stop.send(true);
    ingest.await.unwrap();
    workers.await.unwrap();
    let max = h.max_running.load(Ordering::SeqCst);
    assert_eq!(
        max, 8,
        "all 8 workers handled at once (each call waited up to 30 s for the others); at most {max} did"
    );
    assert_eq!(h.count(), 40, "each message handled once");
    assert_eq!(iq.pending().await.unwrap(), 0);
    use postroom_core::BacklogProbe as _;
    let b = queue.backlog("par").await.unwrap();
    assert_eq!(
        b.ready + b.unacked,
        0,
        "every delivery acked after it was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_mode_processes_in_sequence_across_a_gap() {
    let (_db, _store, iq) = setup("ord", ordered(4, Duration::from_secs(20))).await;
    let k: Vec<ReceivedMessage> = (1..=5).map(|v| received("k", v)).collect();
    for v in [0, 1, 3, 4] {
        assert!(iq.store(&k[v]).await.unwrap());
    }
    for v in 1..=3 {
        iq.store(&received("l", v)).await.unwrap();
    }
    assert!(
        !iq.store(&k[0]).await.unwrap(),
        "a duplicate is not stored twice"
    );
    let h = Arc::new(Recorder {
        sleep: Duration::from_millis(20),
        ..Recorder::default()
    });
    let (stop, rx) = watch::channel(false);
    let workers = spawn_workers(&iq, h.clone(), rx);
    assert!(
        eventually(Duration::from_secs(10), async || h.versions_of("k").len()
            == 2
            && h.versions_of("l").len() == 3)
        .await
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        h.versions_of("k"),
        vec![1, 2],
        "4 and 5 wait for the missing 3"
    );
    iq.store(&k[2]).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), async || h.versions_of("k").len()
            == 5)
        .await,
        "the gap filled"
    );
    let _ = stop.send(true);
    workers.await.unwrap();
    assert_eq!(h.versions_of("k"), vec![1, 2, 3, 4, 5]);
    assert_eq!(h.versions_of("l"), vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_that_never_fills_parks_the_waiting_message() {
    let (_db, store, iq) = setup("gap", ordered(2, Duration::from_millis(400))).await;
    let three = received("g", 3);
    iq.store(&received("g", 1)).await.unwrap();
    iq.store(&three).await.unwrap();
    let h = Arc::new(Recorder::default());
    let (stop, rx) = watch::channel(false);
    let workers = spawn_workers(&iq, h.clone(), rx);
    let parking = store.parking();
    let f = ParkingFilter {
        consumer: Some("gap".into()),
        ..ParkingFilter::default()
    };
    let started = Instant::now();
    let mut parked = Vec::new();
    while parked.is_empty() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        parked = parking.search(&f, 10).await.unwrap();
    }
    let _ = stop.send(true);
    workers.await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].message_id, three.id.unwrap());
    assert_eq!(parked[0].error_code, "version_gap");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "waited the bounded time first"
    );
    assert_eq!(h.versions_of("g"), vec![1], "3 never reached the handler");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_record_the_error_retry_on_the_ladder_then_park_and_redrive_rearms() {
    let (_db, store, iq) = setup("fail", |c| c.workers = 2).await;
    let msg = received("f", 1);
    iq.store(&msg).await.unwrap();
    let h = Arc::new(Recorder::default());
    h.fail.store(true, Ordering::SeqCst);
    let (stop, rx) = watch::channel(false);
    let workers = spawn_workers(&iq, h.clone(), rx);
    assert!(eventually(Duration::from_secs(5), async || h.count() >= 1).await);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let err: Option<String> = queue_row_column(&store, &msg, "last_error").await;
        if err
            .as_deref()
            .is_some_and(|e| e.contains("dependency_down"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the failure is recorded with its error within 20 s; last_error is {err:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let parking = store.parking();
    let f = ParkingFilter {
        consumer: Some("fail".into()),
        ..ParkingFilter::default()
    };
    let started = Instant::now();
    while parking.count(&f).await.unwrap() == 0 && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let parked = parking.search(&f, 10).await.unwrap();
    assert_eq!(parked.len(), 1, "parked once the budget is spent");
    assert_eq!(parked[0].attempts, 3);
    let calls = h.calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().map(|c| c.3).collect::<Vec<_>>(),
        vec![0, 1, 2],
        "one call per attempt"
    );
    assert!(calls[1].4 - calls[0].4 >= Duration::from_millis(200));
    assert!(calls[2].4 - calls[1].4 >= Duration::from_millis(300));
    // A redrive brings the same id back: the parked row is re-armed with a fresh budget.
    h.fail.store(false, Ordering::SeqCst);
    let mut again = msg.clone();
    again.headers = postroom_core::parking::redrive::redrive_message(&parked[0]).headers;
    assert!(iq.store(&again).await.unwrap());
    assert!(eventually(Duration::from_secs(5), async || h.count() == 4).await);
    let started = Instant::now();
    while iq.pending().await.unwrap() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the redriven message is marked done"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(true);
    workers.await.unwrap();
    assert_eq!(h.calls.lock().unwrap()[3].3, 0, "fresh budget");
}

/// A parked row comes back only by a redrive (a copy whose `x-redrive-count` is higher than the
/// parked one's), never by a duplicate delivery of the same copy: no automatic parking → work
/// loop with a fresh budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_delivery_never_brings_a_parked_row_back_only_a_redrive_does() {
    struct Rejects;
    #[async_trait]
    impl Handler for Rejects {
        async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
            Err(HandlerError::permanent("rejected", "always rejected"))
        }
    }
    let (_db, store, iq) = setup("dup", |_| {}).await;
    let msg = received("d1", 1);
    assert!(iq.store(&msg).await.unwrap(), "new");
    let (stop, rx) = watch::channel(false);
    let workers = spawn_workers(&iq, Arc::new(Rejects), rx);
    let parking = store.parking();
    let id = msg.id.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while parking.get(id).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "not parked within 20 s");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop.send(true).unwrap();
    workers.await.unwrap();
    let parked = parking.get(id).await.unwrap();
    assert_eq!(parked.len(), 1, "parked once");

    // The broker delivers the same copy again (a lost ack, a restart): it stays parked.
    assert!(!iq.store(&msg).await.unwrap(), "a duplicate");
    assert_eq!(
        iq.pending().await.unwrap(),
        0,
        "the parked row did not come back"
    );

    // An operator redrives it: the redriven copy carries a higher x-redrive-count.
    let copy = postroom_core::parking::redrive::redrive_message(&parked[0]);
    let redriven = ReceivedMessage::new(Some(copy.id), "orders", copy.headers, copy.body);
    assert!(
        iq.store(&redriven).await.unwrap(),
        "brought back by the redrive"
    );
    assert_eq!(iq.pending().await.unwrap(), 1);
    // And a duplicate of the redriven copy, once parked again, does not bring it back either.
    assert!(!iq.store(&redriven).await.unwrap(), "pending: a duplicate");
}

/// A worker that dies holding a row (its runtime goes away in the middle of the handler, as
/// with a killed process) leaves the row leased; once the lease runs out another worker takes
/// it and marks it done, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_row_is_taken_by_another_once_its_lease_expires() {
    struct Hangs(tokio::sync::mpsc::UnboundedSender<Instant>);
    #[async_trait]
    impl Handler for Hangs {
        async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
            let _ = self.0.send(Instant::now());
            std::future::pending().await
        }
    }
    const LEASE: Duration = Duration::from_secs(3);
    let tweak = |c: &mut InboxQueueConfig| {
        c.workers = 1;
        c.lease = LEASE;
        c.consumer.handler_timeout = Duration::from_secs(2);
    };
    let (db, store, iq) = setup("lease", tweak).await;
    let msg = received("w", 1);
    assert!(iq.store(&msg).await.unwrap());

    // The doomed worker: a runtime and a pool of its own.
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (_doomed_stop, doomed_rx) = watch::channel(false);
    let (url, prefix) = (db.url.clone(), store.prefix().clone());
    let started_wall = Utc::now();
    doomed.spawn(async move {
        let pool = common::pool_at(&url, 2).await;
        let iq = InboxQueue::new(pool, prefix, config("lease", tweak)).unwrap();
        iq.run_workers(Arc::new(Hangs(entered_tx)), doomed_rx).await;
    });
    tokio::time::timeout(Duration::from_secs(30), entered.recv())
        .await
        .expect("the doomed worker claims the row within 30 s")
        .expect("the doomed worker entered its handler");
    doomed.shutdown_background();
    // The lease is kept on the database's clock (`locked_until` against `now()`): the
    // takeover is measured on it, not on this process's monotonic clock, which runs apart
    // from the wall clock while NTP corrects it.
    let lease_until: DateTime<Utc> = queue_row_column(&store, &msg, "locked_until").await;

    let h = Arc::new(Recorder::default());
    let (stop, rx) = watch::channel(false);
    let survivor = spawn_workers(&iq, h.clone(), rx);
    let deadline = Instant::now() + LEASE + Duration::from_secs(30);
    while h.count() == 0 || iq.pending().await.unwrap() > 0 {
        assert!(
            Instant::now() < deadline,
            "the dead worker's row was not taken over and done within its lease + 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(true);
    survivor.await.unwrap();
    let calls = h.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "the survivor handled it once");
    assert_eq!(calls[0].0, msg.id.unwrap());
    assert!(
        calls[0].5 >= lease_until,
        "taken over at {}, before the doomed worker's lease ran out at {lease_until}",
        calls[0].5
    );
    assert!(
        lease_until - started_wall >= chrono::Duration::from_std(LEASE).unwrap(),
        "the doomed worker's lease ran out at {lease_until}, less than {LEASE:?} after it started at {started_wall}"
    );
    let status: String = queue_row_column(&store, &msg, "status").await;
    assert_eq!(status, "done");
}

/// Fails on the dependency for aggregates named `down-…` (an outage), applies the others;
/// remembers the aggregates it applied.
#[derive(Default)]
struct Outage {
    applied: Mutex<Vec<String>>,
}

#[async_trait]
impl Handler for Outage {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let agg = &m.envelope.aggregate.id;
        if agg.starts_with("down-") {
            return Err(HandlerError::transient(
                "dependency_down",
                "injected outage",
            ));
        }
        self.applied.lock().unwrap().push(agg.clone());
        Ok(Handled::Applied)
    }
}

/// With the default circuit breaker: an outage opens it, and its trial claim holds only rows
/// that end without handling (a second copy of a version already applied, an undecodable
/// body, a message waiting behind a gap). Such a trial says nothing about the dependency, so
/// it ends without a verdict and the next claim is a new trial: the queue goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trial_claim_of_rows_settled_without_handling_does_not_stop_the_queue() {
    let (_db, store, iq) = setup("trial", |c| {
        c.workers = 1;
        c.batch = 3;
        c.ordered = Some(OrderedMode {
            gap_wait: Duration::from_secs(60),
            recheck: Duration::from_millis(30),
        });
        // One failure parks: the outage's rows do not come back into the trial claim.
        c.consumer.retry.max_retries = 0;
        assert_eq!(
            c.consumer.breaker,
            postroom_core::BreakerConfig::default(),
            "the default breaker"
        );
    })
    .await;
    iq.store(&received("a", 1)).await.unwrap();
    let threshold = postroom_core::BreakerConfig::default().failure_threshold;
    for n in 0..threshold {
        iq.store(&received(&format!("down-{n}"), 1)).await.unwrap();
    }
    let h = Arc::new(Outage::default());
    let (stop, rx) = watch::channel(false);
    let workers = spawn_workers(&iq, h.clone(), rx);
    let parking = store.parking();
    let f = ParkingFilter {
        consumer: Some("trial".into()),
        ..ParkingFilter::default()
    };
    assert!(
        eventually(Duration::from_secs(10), async || {
            parking.count(&f).await.unwrap() == u64::from(threshold)
        })
        .await,
        "the outage's messages fail and park"
    );
    // The breaker is open now, for its cooldown; what its trial claim will hold:
    iq.store(&received("a", 1)).await.unwrap();
    let undecodable = ReceivedMessage::new(
        Some(MessageId::new()),
        "orders",
        postroom_core::Headers::new(),
        b"not an envelope".to_vec(),
    );
    iq.store(&undecodable).await.unwrap();
    iq.store(&received("b", 3)).await.unwrap();
    // And after it, a message the dependency handles.
    iq.store(&received("c", 1)).await.unwrap();
    let handled_c = eventually(Duration::from_secs(15), async || {
        h.applied.lock().unwrap().iter().any(|a| a == "c")
    })
    .await;
    let _ = stop.send(true);
    workers.await.unwrap();
    assert!(
        handled_c,
        "the queue stopped after a trial claim without a verdict; applied: {:?}",
        h.applied.lock().unwrap()
    );
    assert_eq!(*h.applied.lock().unwrap(), vec!["a", "c"]);
}
