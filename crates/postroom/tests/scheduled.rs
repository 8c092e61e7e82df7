//! Scheduled sends through the front door, on SQLite (the embedded queue) and on PostgreSQL with
//! RabbitMQ: a message written with a `not_before` is received no earlier than that time (the
//! time read by the consumer when the message reaches it) and soon after it, although the
//! relay's idle wait is far longer; a relay stopped before the time and started again keeps the
//! schedule; a cancelled message never arrives; an unscheduled message written after a
//! scheduled one, of the same aggregate or another, is not held back.

use postroom::core::chrono::{self, Utc};
use postroom::{
    Contract, Envelope, Handled, HandlerError, Message, MessageId, OutgoingMessage, RelayConfig,
    Running, ScheduledMessage, Service, TypedHandler, async_trait, consumer,
};
use postroom_postgres::PgStore;
use postroom_sqlite::SqliteStore;
use postroom_testkit::servers::{TestDb, suffix};
use postroom_testkit::wait::eventually;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Serialize, Deserialize)]
struct Reminder {
    name: String,
}

impl Contract for Reminder {
    const TYPE: &'static str = "reminder.due";
}

/// The relay's idle wait in these tests: far longer than any lateness they accept, so that a
/// message on time shows the relay woke for it rather than polled.
const IDLE_WAIT: Duration = Duration::from_secs(10);

/// The most a message may arrive after its time: the relay's wake-up, its claim, the publish and
/// the consumer's receive, on a loaded two-core machine.
const MOST_LATE_MS: i64 = 2000;

/// What the consumer saw: each message's name and the times (Unix milliseconds, read when the
/// message reached the handler) it was received.
#[derive(Clone, Default)]
struct Arrivals(Arc<Mutex<HashMap<String, Vec<i64>>>>);

impl Arrivals {
    fn of(&self, name: &str) -> Vec<i64> {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    fn names(&self) -> Vec<String> {
        let mut n: Vec<_> = self.0.lock().unwrap().keys().cloned().collect();
        n.sort();
        n
    }

    async fn wait_for(&self, names: &[&str], bound: Duration) {
        let arrived = eventually(bound, || async {
            names.iter().all(|n| !self.of(n).is_empty())
        })
        .await;
        assert!(
            arrived,
            "waited {bound:?} for {names:?}; arrived: {:?}",
            self.names()
        );
    }
}

struct Record(Arrivals);

#[async_trait]
impl TypedHandler<Reminder> for Record {
    async fn handle(&self, m: Message<Reminder>) -> Result<Handled, HandlerError> {
        let now = Utc::now().timestamp_millis();
        self.0
            .0
            .lock()
            .unwrap()
            .entry(m.data.name.clone())
            .or_default()
            .push(now);
        Ok(Handled::Applied)
    }
}

fn amqp() -> String {
    std::env::var("POSTROOM_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn rabbit_api() -> String {
    std::env::var("POSTROOM_TEST_RABBIT_API")
        .unwrap_or_else(|_| "http://guest:guest@127.0.0.1:15672".into())
}

/// Where a test runs: a SQLite file of its own, or a PostgreSQL database of its own with
/// RabbitMQ names of its own (deleted on drop).
enum Stack {
    Sqlite {
        _dir: tempfile::TempDir,
        path: String,
    },
    Postgres {
        db: TestDb,
        prefix: String,
    },
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Stack::Postgres { prefix, .. } = self {
            let prefix = format!("{prefix}.");
            postroom_testkit::servers::clean_up(async move {
                let api = postroom_rabbitmq::ManagementApi::new(&rabbit_api(), "/").unwrap();
                let _ = api.delete_everything_named(&prefix).await;
            });
        }
    }
}

impl Stack {
    fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.db").to_str().unwrap().to_string();
        Stack::Sqlite { _dir: dir, path }
    }

    async fn postgres() -> Self {
        Stack::Postgres {
            db: TestDb::create().await,
            prefix: format!("sch-{}", suffix()),
        }
    }

    async fn open(&self) -> Service {
        let b = Service::builder();
        let b = match self {
            Stack::Sqlite { path, .. } => b.database(path),
            Stack::Postgres { db, prefix } => b.database(&db.url).broker(&amqp()).prefix(prefix),
        };
        b.open().await.expect("open a service")
    }

    /// A service consuming reminders into `arrivals`.
    async fn consumer(&self, arrivals: &Arrivals) -> Running {
        self.open()
            .await
            .consumer(consumer::<Reminder>("reminders", Record(arrivals.clone())))
            .start()
            .await
            .expect("start the consumer")
    }

    /// A service running the claiming relay (idle wait [`IDLE_WAIT`]), and its store.
    async fn relay(&self) -> (Running, Store) {
        let service = self.open().await;
        let store = Store::of(&service);
        let running = service
            .bind_for("reminders", &[Reminder::TYPE])
            .relay_with(RelayConfig {
                relay_id: format!("relay-{}", suffix()),
                idle_wait: IDLE_WAIT,
                ..RelayConfig::default()
            })
            .start()
            .await
            .expect("start the relay");
        (running, store)
    }
}

/// The store a service opened, written to as a producer does.
enum Store {
    Sqlite(SqliteStore),
    Pg(PgStore),
}

fn reminder(name: &str) -> OutgoingMessage {
    reminder_of(name, name, 1)
}

fn reminder_of(name: &str, aggregate: &str, version: u64) -> OutgoingMessage {
    let env = Envelope::builder(Reminder::TYPE, "tests")
        .aggregate("order", aggregate, version)
        .data(serde_json::json!({ "name": name }))
        .build();
    OutgoingMessage::from_envelope(&env, Reminder::TYPE)
}

/// A time `ms` milliseconds from now, to the millisecond.
fn in_ms(ms: i64) -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis() + ms).unwrap()
}

impl Store {
    fn of(service: &Service) -> Self {
        if let Some(s) = service.store::<SqliteStore>() {
            Store::Sqlite(s.clone())
        } else {
            Store::Pg(
                service
                    .store::<PgStore>()
                    .expect("SQLite or PostgreSQL")
                    .clone(),
            )
        }
    }

    /// Write `m` in a transaction of its own; returns its time (Unix milliseconds) as the
    /// store keeps it.
    async fn schedule(&self, m: &ScheduledMessage) -> i64 {
        match self {
            Store::Sqlite(s) => {
                let mut tx = s.begin().await.unwrap();
                postroom_sqlite::outbox::schedule(&mut tx, m).await.unwrap();
                tx.commit().await.unwrap();
            }
            Store::Pg(s) => {
                let mut tx = s.begin().await.unwrap();
                postroom_postgres::outbox::schedule(&mut tx, s.prefix(), m)
                    .await
                    .unwrap();
                postroom_postgres::commit(tx).await.unwrap();
            }
        }
        self.not_before_ms(m.message.id).await
    }

    async fn enqueue(&self, m: &OutgoingMessage) {
        match self {
            Store::Sqlite(s) => {
                let mut tx = s.begin().await.unwrap();
                postroom_sqlite::outbox::enqueue(&mut tx, m).await.unwrap();
                tx.commit().await.unwrap();
            }
            Store::Pg(s) => {
                let mut tx = s.begin().await.unwrap();
                postroom_postgres::outbox::enqueue(&mut tx, s.prefix(), m)
                    .await
                    .unwrap();
                postroom_postgres::commit(tx).await.unwrap();
            }
        }
    }

    /// Cancel `id` in a transaction of its own, committed or (with `commit` false) rolled back.
    async fn cancel(&self, id: MessageId, commit: bool) -> bool {
        match self {
            Store::Sqlite(s) => {
                let mut tx = s.begin().await.unwrap();
                let done = postroom_sqlite::outbox::cancel(&mut tx, id).await.unwrap();
                if commit {
                    tx.commit().await.unwrap();
                } else {
                    tx.rollback().await.unwrap();
                }
                done
            }
            Store::Pg(s) => {
                let mut tx = s.begin().await.unwrap();
                let done = postroom_postgres::outbox::cancel(&mut tx, s.prefix(), id)
                    .await
                    .unwrap();
                if commit {
                    postroom_postgres::commit(tx).await.unwrap();
                } else {
                    tx.rollback().await.unwrap();
                }
                done
            }
        }
    }

    /// The time the outbox keeps for scheduled row `id`, in Unix milliseconds (rounded up).
    async fn not_before_ms(&self, id: MessageId) -> i64 {
        match self {
            Store::Sqlite(s) => sqlx::query_scalar(
                "SELECT not_before FROM postroom_outbox WHERE message_id = ?",
            )
            .bind(id.to_string())
            .fetch_one(s.pool())
            .await
            .unwrap(),
            Store::Pg(s) => sqlx::query_scalar(&format!(
                "SELECT ceil(extract(epoch FROM not_before) * 1000)::bigint FROM {}outbox WHERE id = $1",
                s.prefix()
            ))
            .bind(id.as_uuid())
            .fetch_one(s.pool())
            .await
            .unwrap(),
        }
    }
}

/// Each of `expected` (name, time) arrived once, not before its time and at most
/// [`MOST_LATE_MS`] after it; returns the lateness of each, in milliseconds.
fn on_time(arrivals: &Arrivals, expected: &[(String, i64)]) -> Vec<i64> {
    let mut late = Vec::new();
    for (name, not_before) in expected {
        let got = arrivals.of(name);
        assert_eq!(got.len(), 1, "{name} arrived once: {got:?}");
        let lateness = got[0] - not_before;
        assert!(
            lateness >= 0,
            "{name} arrived {} ms before its time ({not_before})",
            -lateness
        );
        assert!(
            lateness <= MOST_LATE_MS,
            "{name} arrived {lateness} ms after its time: the relay did not wake for it (its idle wait is {IDLE_WAIT:?})"
        );
        late.push(lateness);
    }
    late
}

async fn none_early_and_each_soon_after_its_time(stack: Stack) {
    let arrivals = Arrivals::default();
    let consumer = stack.consumer(&arrivals).await;
    let (relay, store) = stack.relay().await;
    let mut expected = Vec::new();
    for i in 0..6 {
        let name = format!("at-{i}");
        let m = reminder(&name).not_before(in_ms(400 + 250 * i));
        expected.push((name, store.schedule(&m).await));
    }
    for (name, delay) in [("after-700ms", 700), ("after-1500ms", 1500)] {
        let m = reminder(name).deliver_after(Duration::from_millis(delay));
        expected.push((name.to_string(), store.schedule(&m).await));
    }
    // A time already past is due at once: on time is soon after it was written.
    let past = reminder("past").not_before(in_ms(-3_600_000));
    let written = Utc::now().timestamp_millis();
    assert!(store.schedule(&past).await < written);
    expected.push(("past".into(), written));
    let names: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    arrivals.wait_for(&names, Duration::from_secs(20)).await;
    // Nothing more comes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = on_time(&arrivals, &expected);
    eprintln!("lateness (ms): {late:?}");
    relay.shutdown().await;
    consumer.shutdown().await;
}

async fn a_cancelled_message_never_arrives(stack: Stack) {
    let arrivals = Arrivals::default();
    let consumer = stack.consumer(&arrivals).await;
    let (relay, store) = stack.relay().await;
    let cancelled = reminder("cancelled").not_before(in_ms(1200));
    let kept = reminder("kept").not_before(in_ms(1200));
    let rolled_back = reminder("cancel-rolled-back").not_before(in_ms(1200));
    let kept_at = store.schedule(&kept).await;
    store.schedule(&cancelled).await;
    let rolled_back_at = store.schedule(&rolled_back).await;
    assert!(store.cancel(cancelled.message.id, true).await, "cancelled");
    assert!(
        !store.cancel(cancelled.message.id, true).await,
        "a second cancel finds nothing"
    );
    assert!(
        store.cancel(rolled_back.message.id, false).await,
        "cancelled in a transaction that then rolls back"
    );
    assert!(
        !store.cancel(MessageId::new(), true).await,
        "an unknown id is not cancelled"
    );
    let now = reminder("unscheduled");
    store.enqueue(&now).await;
    assert!(
        !store.cancel(now.id, true).await,
        "an unscheduled message is not cancelled"
    );
    arrivals
        .wait_for(
            &["kept", "cancel-rolled-back", "unscheduled"],
            Duration::from_secs(20),
        )
        .await;
    // Well past the cancelled one's time, it has not come.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        arrivals.of("cancelled").is_empty(),
        "a cancelled message arrived"
    );
    on_time(
        &arrivals,
        &[
            ("kept".into(), kept_at),
            ("cancel-rolled-back".into(), rolled_back_at),
        ],
    );
    assert!(
        !store.cancel(kept.message.id, true).await,
        "a sent message is not cancelled"
    );
    relay.shutdown().await;
    consumer.shutdown().await;
}

async fn an_unscheduled_message_is_not_held_back_by_a_scheduled_one(stack: Stack) {
    let arrivals = Arrivals::default();
    let consumer = stack.consumer(&arrivals).await;
    let (relay, store) = stack.relay().await;
    // A charge in a minute for order o-1, then the order's next event and another order's.
    let charge = reminder_of("charge", "o-1", 1).deliver_after(Duration::from_secs(60));
    store.schedule(&charge).await;
    let written = Utc::now().timestamp_millis();
    store
        .enqueue(&reminder_of("same-aggregate", "o-1", 2))
        .await;
    store
        .enqueue(&reminder_of("other-aggregate", "o-2", 1))
        .await;
    arrivals
        .wait_for(
            &["same-aggregate", "other-aggregate"],
            Duration::from_secs(20),
        )
        .await;
    for name in ["same-aggregate", "other-aggregate"] {
        let took = arrivals.of(name)[0] - written;
        assert!(
            took <= MOST_LATE_MS,
            "{name} took {took} ms: held back behind the scheduled message"
        );
    }
    assert!(arrivals.of("charge").is_empty(), "the charge came early");
    assert!(
        store.cancel(charge.message.id, true).await,
        "the charge is still scheduled, and cancelled"
    );
    relay.shutdown().await;
    consumer.shutdown().await;
}

async fn a_relay_restart_keeps_the_schedule(stack: Stack) {
    let arrivals = Arrivals::default();
    let consumer = stack.consumer(&arrivals).await;
    let (relay, store) = stack.relay().await;
    let first = reminder("first").not_before(in_ms(1500));
    let second = reminder("second").not_before(in_ms(4500));
    let first_at = store.schedule(&first).await;
    let second_at = store.schedule(&second).await;
    relay.shutdown().await;
    // The first falls due while no relay runs: it waits, and nothing is sent.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(arrivals.names().is_empty(), "sent with no relay running");
    let (relay, _) = stack.relay().await;
    let restarted = Utc::now().timestamp_millis();
    arrivals.wait_for(&["first"], Duration::from_secs(20)).await;
    let took = arrivals.of("first")[0] - restarted;
    assert!(
        took <= MOST_LATE_MS,
        "the overdue message took {took} ms after the restart"
    );
    assert!(arrivals.of("first")[0] >= first_at);
    arrivals
        .wait_for(&["second"], Duration::from_secs(20))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    on_time(&arrivals, &[("second".into(), second_at)]);
    assert_eq!(arrivals.of("first").len(), 1, "the first arrived once");
    relay.shutdown().await;
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_none_early_and_each_soon_after_its_time() {
    none_early_and_each_soon_after_its_time(Stack::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rabbitmq_none_early_and_each_soon_after_its_time() {
    none_early_and_each_soon_after_its_time(Stack::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_cancelled_message_never_arrives() {
    a_cancelled_message_never_arrives(Stack::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rabbitmq_a_cancelled_message_never_arrives() {
    a_cancelled_message_never_arrives(Stack::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_unscheduled_message_is_not_held_back_by_a_scheduled_one() {
    an_unscheduled_message_is_not_held_back_by_a_scheduled_one(Stack::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rabbitmq_an_unscheduled_message_is_not_held_back_by_a_scheduled_one() {
    an_unscheduled_message_is_not_held_back_by_a_scheduled_one(Stack::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_relay_restart_keeps_the_schedule() {
    a_relay_restart_keeps_the_schedule(Stack::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rabbitmq_a_relay_restart_keeps_the_schedule() {
    a_relay_restart_keeps_the_schedule(Stack::postgres().await).await;
}
