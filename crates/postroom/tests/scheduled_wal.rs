//! Scheduled sends under the WAL relay, through the front door, on a PostgreSQL cluster of the
//! test's own (`wal_level = logical`): the log hands a scheduled row over at its commit, but it
//! is not published then. The relay's timer publishes it once it falls due (received no
//! earlier, read on the consumer side, and soon after), once, and a cancelled one never; the
//! unscheduled rows around it still go out from the log at once, with nothing written for them.
//! A WAL relay stopped before the time and started again keeps the schedule.

use postroom::core::chrono::{self, Utc};
use postroom::{
    Contract, Envelope, Handled, HandlerError, Message, OutgoingMessage, Running, ScheduledMessage,
    Service, TypedHandler, async_trait, consumer,
};
use postroom_postgres::PgStore;
use postroom_postgres::wal::WalRelayConfig;
use postroom_testkit::servers::PgCluster;
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

/// The most a message may arrive after its time, on a loaded two-core machine.
const MOST_LATE_MS: i64 = 2000;

/// Each message's name and the times (Unix milliseconds) the handler received it.
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

    async fn wait_for(&self, names: &[&str]) {
        let arrived = eventually(Duration::from_secs(30), || async {
            names.iter().all(|n| !self.of(n).is_empty())
        })
        .await;
        let got: Vec<String> = self.0.lock().unwrap().keys().cloned().collect();
        assert!(arrived, "waited for {names:?}; arrived: {got:?}");
    }

    /// `name` arrived once, not before `not_before` and at most [`MOST_LATE_MS`] after it.
    fn on_time(&self, name: &str, not_before: i64) -> i64 {
        let got = self.of(name);
        assert_eq!(got.len(), 1, "{name} arrived once: {got:?}");
        let late = got[0] - not_before;
        assert!(late >= 0, "{name} arrived {} ms before its time", -late);
        assert!(late <= MOST_LATE_MS, "{name} arrived {late} ms late");
        late
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

fn reminder(name: &str) -> OutgoingMessage {
    let env = Envelope::builder(Reminder::TYPE, "tests")
        .aggregate("order", name, 1)
        .data(serde_json::json!({ "name": name }))
        .build();
    OutgoingMessage::from_envelope(&env, Reminder::TYPE)
}

fn in_ms(ms: i64) -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis() + ms).unwrap()
}

/// Write `m` and return its time as the outbox keeps it (Unix milliseconds, rounded up).
async fn schedule(store: &PgStore, m: &ScheduledMessage) -> i64 {
    let mut tx = store.begin().await.unwrap();
    postroom_postgres::outbox::schedule(&mut tx, store.prefix(), m)
        .await
        .unwrap();
    postroom_postgres::commit(tx).await.unwrap();
    sqlx::query_scalar(
        "SELECT ceil(extract(epoch FROM not_before) * 1000)::bigint FROM postroom_outbox WHERE id = $1",
    )
    .bind(m.message.id.as_uuid())
    .fetch_one(store.pool())
    .await
    .unwrap()
}

async fn enqueue(store: &PgStore, m: &OutgoingMessage) {
    let mut tx = store.begin().await.unwrap();
    postroom_postgres::outbox::enqueue(&mut tx, store.prefix(), m)
        .await
        .unwrap();
    postroom_postgres::commit(tx).await.unwrap();
}

async fn cancel(store: &PgStore, m: &ScheduledMessage) -> bool {
    let mut tx = store.begin().await.unwrap();
    let done = postroom_postgres::outbox::cancel(&mut tx, store.prefix(), m.message.id)
        .await
        .unwrap();
    postroom_postgres::commit(tx).await.unwrap();
    done
}

/// A service consuming reminders from the table queue into `arrivals`, its relay the WAL
/// relay (`relay_id`).
async fn start(cluster: &PgCluster, arrivals: &Arrivals, relay_id: &str) -> (Running, PgStore) {
    let service = Service::builder()
        .database(&cluster.url("postgres"))
        .open()
        .await
        .unwrap();
    let store = service.store::<PgStore>().unwrap().clone();
    let running = service
        .consumer(consumer::<Reminder>("reminders", Record(arrivals.clone())))
        .relay_from_wal(WalRelayConfig {
            relay_id: relay_id.into(),
            retention: None,
            ..WalRelayConfig::default()
        })
        .start()
        .await
        .expect("start with the WAL relay");
    (running, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_relay_leaves_scheduled_rows_to_its_timer_which_sends_them_when_due() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let arrivals = Arrivals::default();
    let (running, store) = start(&cluster, &arrivals, "wal-scheduled").await;
    enqueue(&store, &reminder("before")).await;
    let soon = reminder("soon").not_before(in_ms(1200));
    let later = reminder("later").deliver_after(Duration::from_millis(2500));
    let cancelled = reminder("cancelled").not_before(in_ms(1500));
    let soon_at = schedule(&store, &soon).await;
    let later_at = schedule(&store, &later).await;
    schedule(&store, &cancelled).await;
    let written = Utc::now().timestamp_millis();
    enqueue(&store, &reminder("after")).await;
    assert!(
        cancel(&store, &cancelled).await,
        "cancelled before its time"
    );

    arrivals.wait_for(&["before", "after"]).await;
    let took = arrivals.of("after")[0] - written;
    assert!(
        took <= MOST_LATE_MS,
        "the unscheduled message took {took} ms"
    );
    arrivals.wait_for(&["soon", "later"]).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let late = [
        arrivals.on_time("soon", soon_at),
        arrivals.on_time("later", later_at),
    ];
    eprintln!("lateness (ms): {late:?}");
    assert!(
        arrivals.of("cancelled").is_empty(),
        "a cancelled message arrived"
    );
    assert_eq!(arrivals.of("before").len(), 1);
    assert_eq!(arrivals.of("after").len(), 1);
    assert!(
        !cancel(&store, &soon).await,
        "a sent message is not cancelled"
    );
    running.shutdown().await;
    // The timer marked what it sent; the rows the log published are untouched.
    let marked: Vec<(String, bool)> = sqlx::query_as(
        "SELECT convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'name', published_at IS NOT NULL
         FROM postroom_outbox ORDER BY seq",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        marked,
        vec![
            ("before".into(), false),
            ("soon".into(), true),
            ("later".into(), true),
            ("after".into(), false),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wal_relay_stopped_before_the_time_and_started_again_keeps_the_schedule() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let arrivals = Arrivals::default();
    let (running, store) = start(&cluster, &arrivals, "wal-scheduled-1").await;
    let first = reminder("first").not_before(in_ms(1500));
    let second = reminder("second").not_before(in_ms(5000));
    schedule(&store, &first).await;
    let second_at = schedule(&store, &second).await;
    running.shutdown().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        arrivals.of("first").is_empty(),
        "sent with no relay running"
    );
    let (running, _) = start(&cluster, &arrivals, "wal-scheduled-2").await;
    let restarted = Utc::now().timestamp_millis();
    arrivals.wait_for(&["first", "second"]).await;
    let took = arrivals.of("first")[0] - restarted;
    assert!(took <= MOST_LATE_MS, "the overdue message took {took} ms");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(arrivals.of("first").len(), 1);
    arrivals.on_time("second", second_at);
    running.shutdown().await;
}
