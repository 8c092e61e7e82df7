//! The seed's fault scenarios that apply to Kafka, against both test brokers (tansu and a
//! mock cluster of three brokers): a consumer killed
//! after its commit and before its offset was stored; a database down longer than the retry
//! budget, and one back within it; a corrupt record; a rebalance during processing; and no
//! retry handled before its due time. The producer's fatal error is in `producer_fatal.rs`.

mod common;

use common::ordered::{OrderedHandler, event, on_orders, publish_in_order, retries, wait_until};
use common::{TestKafka, parked};
use postroom_core::{ErrorClass, Handled, Handler, HandlerError, Incoming, MessageId, Transport};
use postroom_kafka::headers::due_at;
use postroom_testkit::StoreFixture;
use postroom_testkit::cases::assert_parked_for;
use postroom_testkit::stores::sqlite::SqliteFixture;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Applies one effect per message id through the SQLite inbox; optionally "dies" right after
/// the commit of one message (never returns), can be slowed down, and can be held (before
/// applying anything) once it handled a number of messages, until a gate opens.
struct InboxHandler {
    store: Arc<SqliteFixture>,
    consumer: String,
    die_after_commit_of: Option<MessageId>,
    died: AtomicBool,
    pause: Duration,
    hold_after: Option<(usize, tokio::sync::watch::Receiver<bool>)>,
    results: Mutex<Vec<(MessageId, Handled)>>,
}

impl InboxHandler {
    fn new(store: Arc<SqliteFixture>, consumer: &str) -> Self {
        Self {
            store,
            consumer: consumer.into(),
            die_after_commit_of: None,
            died: AtomicBool::new(false),
            pause: Duration::ZERO,
            hold_after: None,
            results: Mutex::new(Vec::new()),
        }
    }

    fn results_for(&self, id: MessageId) -> Vec<Handled> {
        self.results
            .lock()
            .unwrap()
            .iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, h)| h.clone())
            .collect()
    }

    fn handled(&self) -> usize {
        self.results.lock().unwrap().len()
    }
}

#[postroom_core::async_trait]
impl Handler for InboxHandler {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        tokio::time::sleep(self.pause).await;
        if let Some((n, gate)) = &self.hold_after
            && self.handled() >= *n
        {
            let mut gate = gate.clone();
            gate.wait_for(|open| *open)
                .await
                .map_err(|e| HandlerError::transient("gate", e.to_string()))?;
        }
        let id = m.envelope.id;
        let handled = self
            .store
            .apply_effect(&self.consumer, id, &format!("effect:{id}"))
            .await
            .map_err(HandlerError::from)?;
        self.results.lock().unwrap().push((id, handled.clone()));
        if self.die_after_commit_of == Some(id) && !self.died.swap(true, AtomicOrdering::SeqCst) {
            // The process dies here: committed, never returns, so never acknowledged.
            std::future::pending::<()>().await;
        }
        Ok(handled)
    }
}

/// A consumer killed after COMMIT and before its offset was stored: the record comes again
/// to the next member of the group, the inbox absorbs it, and the effect happens once.
async fn consumer_killed_after_commit_before_offset_stored_applies_once(kafka: TestKafka) {
    let t = kafka.transport(kafka.config.clone().partitions(1));
    let store = Arc::new(SqliteFixture::fresh().await);
    let events: Vec<_> = (1..=5).map(|v| event("k", v)).collect();
    let doomed = events[2].id;
    let mut first = InboxHandler::new(store.clone(), "killed");
    first.die_after_commit_of = Some(doomed);
    let first = Arc::new(first);
    let a = on_orders(&t, "killed", first.clone(), retries("1s", 3), 2).await;
    publish_in_order(t.as_ref(), "orders", &events).await;
    assert!(
        wait_until(Duration::from_secs(30), || first
            .died
            .load(AtomicOrdering::SeqCst))
        .await,
        "the doomed record was handled and committed"
    );
    a.kill().await;
    let second = Arc::new(InboxHandler::new(store.clone(), "killed"));
    let b = on_orders(&t, "killed", second.clone(), retries("1s", 3), 2).await;
    assert!(
        wait_until(Duration::from_secs(40), || !second
            .results_for(doomed)
            .is_empty())
        .await,
        "the record whose offset was never stored came again"
    );
    assert!(
        wait_until(Duration::from_secs(20), || {
            events.iter().all(|e| {
                !first.results_for(e.id).is_empty() || !second.results_for(e.id).is_empty()
            })
        })
        .await
    );
    b.stop().await;
    assert_eq!(
        second.results_for(doomed),
        vec![Handled::Duplicate],
        "absorbed by the inbox"
    );
    for e in &events {
        let n = store
            .effect_count("killed", &format!("effect:{}", e.id))
            .await
            .unwrap();
        assert_eq!(n, 1, "one effect for version {}", e.aggregate.version);
    }
}

/// [`parked`], ingesting again (three times at most) while nothing of `consumer` is parked.
async fn parked_within_three_ingests(
    t: &dyn Transport,
    store: &Arc<SqliteFixture>,
    consumer: &str,
) -> Vec<postroom_core::ParkedMessage> {
    let mut found = Vec::new();
    for _ in 0..3 {
        found = parked(t, store, consumer).await;
        if !found.is_empty() {
            break;
        }
    }
    found
}

/// A database down longer than the budget: every stage of the ladder is walked (each retry
/// handled no earlier than its due time), then the record is parked with its diagnostics.
async fn database_down_longer_than_budget_walks_every_stage_then_parks(kafka: TestKafka) {
    let t = kafka.transport(kafka.config.clone());
    let store = Arc::new(SqliteFixture::fresh().await);
    let h = OrderedHandler::new(&[("down", 1, u32::MAX)], false);
    let r = on_orders(&t, "dbdown", h.clone(), retries("1s,2s", 2), 2).await;
    publish_in_order(t.as_ref(), "orders", &[event("down", 1)]).await;
    assert!(
        wait_until(Duration::from_secs(30), || h.seen().len() == 3).await,
        "three attempts"
    );
    let found = parked_within_three_ingests(t.as_ref(), &store, "dbdown").await;
    r.stop().await;
    let seen = h.seen();
    assert_eq!(
        seen.iter().map(|s| s.attempt).collect::<Vec<_>>(),
        vec![0, 1, 2],
        "one call per stage, no hot loop"
    );
    for (k, pair) in seen.windows(2).enumerate() {
        let stage = Duration::from_secs(1 << k);
        assert!(
            pair[1].at - pair[0].at >= stage,
            "stage {k} waited its delay"
        );
        let due = due_at(&pair[1].headers).expect("a retry copy carries its due time");
        assert!(pair[1].wall >= due, "retry {k} handled before its due time");
    }
    assert_eq!(found.len(), 1, "parked once");
    let p = &found[0];
    assert_parked_for(p, "dependency_down", 3, "budget exhausted");
    assert_eq!(p.error_class, ErrorClass::Transient);
    assert_eq!(p.routing_key, "orders");
}

/// A database back within the budget: the record is applied once.
async fn database_back_within_budget_applies_once(kafka: TestKafka) {
    let t = kafka.transport(kafka.config.clone());
    let store = Arc::new(SqliteFixture::fresh().await);
    let h = OrderedHandler::new(&[("back", 1, 1)], false);
    let r = on_orders(&t, "dbback", h.clone(), retries("1s,2s", 2), 2).await;
    publish_in_order(t.as_ref(), "orders", &[event("back", 1)]).await;
    assert!(wait_until(Duration::from_secs(30), || h.applied_of("back").len() == 1).await);
    // Nothing more comes: the success was acknowledged.
    tokio::time::sleep(Duration::from_secs(3)).await;
    r.stop().await;
    assert_eq!(h.calls_of("back"), vec![(1, 0), (1, 1)]);
    assert_eq!(h.applied_of("back"), vec![1], "applied once");
    assert!(parked(t.as_ref(), &store, "dbback").await.is_empty());
}

/// A record that is not an envelope is parked on its first delivery, under an id derived from
/// its body, and never reaches the handler.
async fn corrupt_record_is_parked_on_first_delivery(kafka: TestKafka) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let t = kafka.transport(kafka.config.clone());
    let store = Arc::new(SqliteFixture::fresh().await);
    let h = OrderedHandler::new(&[], false);
    let r = on_orders(&t, "corrupt", h.clone(), retries("1s", 2), 2).await;
    let raw: FutureProducer = kafka.config.client_config().create().unwrap();
    let body = b"{\"id\": not json";
    raw.send(
        FutureRecord::<str, [u8]>::to(&format!("{}.orders", kafka.prefix)).payload(body),
        Duration::from_secs(5),
    )
    .await
    .expect("raw send");
    let found = parked_within_three_ingests(t.as_ref(), &store, "corrupt").await;
    r.stop().await;
    assert!(h.seen().is_empty(), "the handler never sees it");
    assert_eq!(found.len(), 1);
    let p = &found[0];
    assert_eq!(p.error_code, "malformed");
    assert_eq!(p.error_class, ErrorClass::Permanent);
    assert_eq!(p.attempts, 1, "parked on the first delivery");
    assert_eq!(p.message_id, MessageId::derived_from(body));
    assert_eq!(p.body, body.to_vec(), "the body is kept as it was");
}

/// A second member joins while the first is processing, then the first leaves: partitions
/// move twice, in-flight work is finished or abandoned, nothing is lost, and every duplicate
/// is absorbed by the inbox.
async fn rebalance_during_processing_loses_nothing_and_absorbs_duplicates(kafka: TestKafka) {
    let t = kafka.transport(kafka.config.clone().partitions(4));
    let store = Arc::new(SqliteFixture::fresh().await);
    let events: Vec<_> = (0..80)
        .map(|i| event(&format!("key{}", i % 16), 1 + i / 16))
        .collect();
    // The first member handles 15 records, then its handlers are held mid-delivery until the
    // second member handled some: the rebalance comes while the first has work in flight (and
    // records read ahead), however fast it would otherwise finish the topic.
    let (open_gate, gate) = tokio::sync::watch::channel(false);
    let mut ha = InboxHandler::new(store.clone(), "rebal");
    ha.pause = Duration::from_millis(40);
    ha.hold_after = Some((15, gate));
    let ha = Arc::new(ha);
    let mut hb = InboxHandler::new(store.clone(), "rebal");
    hb.pause = Duration::from_millis(40);
    let hb = Arc::new(hb);
    let a = on_orders(&t, "rebal", ha.clone(), retries("1s", 3), 4).await;
    publish_in_order(t.as_ref(), "orders", &events).await;
    assert!(wait_until(Duration::from_secs(30), || ha.handled() >= 15).await);
    let b = on_orders(&t, "rebal", hb.clone(), retries("1s", 3), 4).await;
    assert!(
        wait_until(Duration::from_secs(40), || hb.handled() >= 5).await,
        "the second member got partitions"
    );
    open_gate.send_replace(true);
    a.stop().await;
    let all_done = |ha: &InboxHandler, hb: &InboxHandler| {
        events
            .iter()
            .all(|e| !ha.results_for(e.id).is_empty() || !hb.results_for(e.id).is_empty())
    };
    assert!(
        wait_until(Duration::from_secs(60), || all_done(&ha, &hb)).await,
        "every record handled after the rebalances"
    );
    b.stop().await;
    let mut counts: HashMap<MessageId, u64> = HashMap::new();
    for e in &events {
        let n = store
            .effect_count("rebal", &format!("effect:{}", e.id))
            .await
            .unwrap();
        counts.insert(e.id, n);
    }
    assert!(
        counts.values().all(|n| *n == 1),
        "one effect per record, none lost: {counts:?}"
    );
}

/// Many records across partitions, each failing twice: no retry copy is handled before its
/// due time, and each waits at least its stage's delay after the previous attempt.
async fn no_retry_is_handled_before_its_due_time(kafka: TestKafka) {
    let t = kafka.transport(kafka.config.clone().partitions(3));
    let keys: Vec<String> = (0..12).map(|i| format!("due{i}")).collect();
    let failures: Vec<(&str, u64, u32)> = keys.iter().map(|k| (k.as_str(), 1, 2)).collect();
    let h = OrderedHandler::new(&failures, false);
    let r = on_orders(&t, "due", h.clone(), retries("1s,2s", 3), 4).await;
    let events: Vec<_> = keys.iter().map(|k| event(k, 1)).collect();
    publish_in_order(t.as_ref(), "orders", &events).await;
    assert!(
        wait_until(Duration::from_secs(60), || h.applied_count() == keys.len()).await,
        "all applied after two retries each"
    );
    r.stop().await;
    let seen = h.seen();
    for k in &keys {
        let calls: Vec<_> = seen.iter().filter(|s| &s.key == k).collect();
        assert_eq!(
            calls.iter().map(|s| s.attempt).collect::<Vec<_>>(),
            vec![0, 1, 2],
            "{k}"
        );
        for (stage, pair) in calls.windows(2).enumerate() {
            let due = due_at(&pair[1].headers).expect("due time");
            assert!(
                pair[1].wall >= due,
                "{k}: attempt {} handled before its due time",
                pair[1].attempt
            );
            assert!(
                pair[1].at - pair[0].at >= Duration::from_secs(1 << stage),
                "{k}: stage {stage} shorter than its delay"
            );
        }
    }
}

/// A retry copy waits in its paused stage partition while the group rebalances (a second
/// member joins and the partitions are dealt again): the pause is worked out again on the new
/// assignment, so the copy is neither stuck behind a pause nobody owns nor handled before its
/// due time. (A member leaving during a rebalance stalls the group on tansu; see the crate
/// docs: the first member leaves only after the copy was handled.)
async fn a_waiting_retry_survives_rebalances_and_is_never_early(kafka: TestKafka) {
    let t = kafka.transport(kafka.config.clone().partitions(2));
    let h = OrderedHandler::new(&[("held", 1, 1)], false);
    let a = on_orders(&t, "held", h.clone(), retries("8s", 2), 2).await;
    publish_in_order(t.as_ref(), "orders", &[event("held", 1)]).await;
    assert!(
        wait_until(Duration::from_secs(30), || h.seen().len() == 1).await,
        "first attempt failed"
    );
    // The copy now waits in the 8 s stage. A second member joins: every partition is revoked
    // and dealt again.
    let b = on_orders(&t, "held", h.clone(), retries("8s", 2), 2).await;
    assert!(
        wait_until(Duration::from_secs(40), || h.applied_of("held") == vec![1]).await,
        "the retry was handled after the rebalances: {:?}",
        h.calls_of("held")
    );
    a.stop().await;
    b.stop().await;
    let seen = h.seen();
    let attempts: Vec<u32> = seen.iter().map(|s| s.attempt).collect();
    assert_eq!(attempts[..2], [0, 1], "{attempts:?}");
    // The original's offset is committed after its retry copy was produced; a rebalance that
    // lands before the commit hands the original out once more (at least once). That copy
    // finds the effect applied; nothing else may come.
    assert!(
        attempts[2..].iter().all(|&a| a == 0),
        "only the original again may follow the retry: {attempts:?}"
    );
    assert_eq!(h.applied_of("held"), vec![1], "applied once");
    let due = due_at(&seen[1].headers).expect("due time");
    assert!(seen[1].wall >= due, "handled before its due time");
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(8));
}

/// Each fault above on both test brokers.
macro_rules! on_both_brokers {
    ($($case:ident: $ladder:literal),* $(,)?) => {
        mod on_tansu {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(TestKafka::new($ladder)).await;
                }
            )*
        }
        mod on_mock_cluster {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(TestKafka::on_mock($ladder)).await;
                }
            )*
        }
    };
}

on_both_brokers!(
        consumer_killed_after_commit_before_offset_stored_applies_once: "1s",
        database_down_longer_than_budget_walks_every_stage_then_parks: "1s,2s",
        database_back_within_budget_applies_once: "1s,2s",
        corrupt_record_is_parked_on_first_delivery: "1s",
        rebalance_during_processing_loses_nothing_and_absorbs_duplicates: "1s",
        no_retry_is_handled_before_its_due_time: "1s,2s",
        a_waiting_retry_survives_rebalances_and_is_never_early: "8s",
);
