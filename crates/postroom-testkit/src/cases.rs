//! The conformance cases. Each takes a fresh backend and asserts on committed effects, parked
//! records and handler calls; none asserts on timing other than "never earlier than".

use crate::backend::Backend;
use crate::effect::{EffectHandler, Fault};
use postroom_core::Delivery as _;
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::stats::StatsSnapshot;
use postroom_core::{
    Envelope, EnvelopeDecoder, ErrorClass, MessageId, OutboxRelay, OutgoingMessage, ParkedStatus,
    ParkingFilter, RelayConfig, RetryPolicy, Route,
};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A unique name for this test's consumer / topic.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    )
}

/// An `order.created` envelope for aggregate `id` at `version`.
pub fn order(id: &str, version: u64) -> Envelope {
    Envelope::builder("order.created", "conformance")
        .aggregate("order", id, version)
        .correlation_id(format!("corr-{id}"))
        .data(serde_json::json!({"order_id": id, "version": version}))
        .build()
}

/// The suite's retry policy for `backend`: its ladder, one retry per stage, no deadline.
pub fn policy<B: Backend>(b: &B) -> RetryPolicy {
    let ladder = b.caps().ladder;
    RetryPolicy {
        max_retries: ladder.len() as u32,
        max_unknown_retries: 1,
        max_age: None,
        jitter: 0.1,
        ladder,
    }
}

/// A consumer running in the background.
pub struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    stats: Arc<postroom_core::stats::ConsumerStats>,
}

impl Running {
    /// Counters so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }
    /// Graceful stop.
    pub async fn stop(self) -> StatsSnapshot {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(30), self.task).await;
        self.stats.snapshot()
    }
}

/// Start a consumer named `name` on `topics` with `handler` and `retry`.
pub async fn start_consumer<B: Backend>(
    b: &Arc<B>,
    name: &str,
    topics: &[&str],
    handler: Arc<EffectHandler<B>>,
    retry: RetryPolicy,
) -> Running {
    let sub = b.subscribe(name, topics).await.expect("subscribe");
    let decoder = EnvelopeDecoder::new().accept("order.created", 1..=1);
    let mut cfg = ConsumerConfig::new(name, decoder);
    cfg.retry = retry;
    cfg.version = "conformance-1".into();
    cfg.concurrency = 1;
    cfg.breaker.failure_threshold = 0;
    let consumer = Consumer::new(cfg, handler);
    let stats = consumer.stats();
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(async move { consumer.run(sub, rx).await });
    Running { stop, task, stats }
}

/// Run relay passes until the outbox is empty.
pub async fn relay_all<B: Backend>(b: &Arc<B>, relay_id: &str) {
    let relay = OutboxRelay::new(
        b.outbox(),
        b.publisher(),
        RelayConfig {
            relay_id: relay_id.into(),
            ..RelayConfig::default()
        },
    );
    for _ in 0..1000 {
        let pass = relay.run_once().await.expect("relay pass");
        if pass.claimed == 0 && b.outbox().pending().await.expect("pending") == 0 {
            return;
        }
        if pass.claimed == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("outbox did not drain");
}

/// Poll `cond` until it holds or `timeout` passes.
pub async fn wait_for<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond().await
}

async fn parked_of<B: Backend>(b: &Arc<B>, consumer: &str) -> Vec<postroom_core::ParkedMessage> {
    let f = ParkingFilter {
        consumer: Some(consumer.into()),
        include_redriven: true,
        ..ParkingFilter::default()
    };
    b.parking().search(&f, 1000).await.expect("parking search")
}

fn ladder_total<B: Backend>(b: &B) -> Duration {
    b.caps().ladder.delays().iter().sum::<Duration>()
}

/// A duplicate delivery of the same id commits nothing new and is acknowledged.
pub async fn dedup_absorbs_duplicate_delivery<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("dedup"), unique("t.dedup."));
    let h = EffectHandler::new(b.clone(), &c, Fault::None);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let env = order("d1", 1);
    b.produce(&env, &topic).await.unwrap();
    relay_all(b, "r1").await;
    b.publisher()
        .publish(&OutgoingMessage::from_envelope(&env, &topic))
        .await
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(20), || async {
            h.calls_for(env.id).len() >= 2
        })
        .await,
        "both copies handled"
    );
    let stats = run.stop().await;
    assert_eq!(
        b.effect_count(&c, "effect:d1").await.unwrap(),
        1,
        "one effect"
    );
    assert_eq!(stats.duplicates, 1);
    assert_eq!(stats.applied, 1);
}

/// A consumer that dies after COMMIT and before ack gets the message again; the inbox makes
/// the repeat harmless; once acked it is not delivered again.
pub async fn ack_only_after_commit<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("ackc"), unique("t.ack."));
    let mut sub = b.subscribe(&c, &[&topic]).await.unwrap();
    let env = order("a1", 1);
    b.produce(&env, &topic).await.unwrap();
    relay_all(b, "r1").await;
    let delivery = wait_next(&mut sub).await.expect("first delivery");
    assert_eq!(delivery.message().id, Some(env.id));
    assert_eq!(
        b.apply_effect(&c, env.id, "effect:a1").await.unwrap(),
        postroom_core::Handled::Applied
    );
    // Crash: neither ack nor nack; the subscriber goes away with the delivery.
    drop(delivery);
    drop(sub);
    let h = EffectHandler::new(b.clone(), &c, Fault::None);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let wait = b.caps().redelivery_after * 3 + Duration::from_secs(10);
    assert!(
        wait_for(wait, || async { !h.calls_for(env.id).is_empty() }).await,
        "redelivered after the crash"
    );
    let stats = run.stop().await;
    assert_eq!(
        stats.duplicates, 1,
        "the redelivery is absorbed as a duplicate"
    );
    assert_eq!(b.effect_count(&c, "effect:a1").await.unwrap(), 1);
    // Acked now: nothing comes back.
    let mut sub = b.subscribe(&c, &[&topic]).await.unwrap();
    let again = next_within(&mut sub, b.caps().redelivery_after + Duration::from_secs(1)).await;
    assert!(again.is_none(), "an acked message is not delivered again");
}

async fn next_within<S: postroom_core::Subscriber>(
    sub: &mut S,
    total: Duration,
) -> Option<S::Delivery> {
    let deadline = Instant::now() + total;
    while Instant::now() < deadline {
        if let Some(d) = sub.next(Duration::from_millis(250)).await.expect("receive") {
            return Some(d);
        }
    }
    None
}

async fn wait_next<S: postroom_core::Subscriber>(sub: &mut S) -> Option<S::Delivery> {
    next_within(sub, Duration::from_secs(20)).await
}

/// Transient failures walk the ladder; no retry arrives before its stage's delay; the message
/// is applied once when the dependency heals.
pub async fn retry_ladder_never_earlier_than_stage<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("ladder"), unique("t.ladder."));
    let ladder = b.caps().ladder;
    let fails = ladder.len() as u32;
    let h = EffectHandler::new(b.clone(), &c, Fault::TransientTimes(fails));
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let env = order("l1", 1);
    b.produce(&env, &topic).await.unwrap();
    relay_all(b, "r1").await;
    let wait = ladder_total(b.as_ref()) * 2 + Duration::from_secs(20);
    assert!(
        wait_for(wait, || async { h.calls_for(env.id).len() as u32 > fails }).await,
        "all attempts made"
    );
    let stats = run.stop().await;
    let calls = h.calls_for(env.id);
    assert_eq!(
        calls.len() as u32,
        fails + 1,
        "one call per attempt, no hot loop"
    );
    for (k, pair) in calls.windows(2).enumerate() {
        assert_eq!(
            pair[1].attempt,
            pair[0].attempt + 1,
            "attempt counter increments by one"
        );
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= ladder.delay(k),
            "retry {k} came after {gap:?}, before its stage delay {:?}",
            ladder.delay(k)
        );
    }
    assert_eq!(b.effect_count(&c, "effect:l1").await.unwrap(), 1);
    assert_eq!(
        stats.retries_by_stage.values().sum::<u64>(),
        u64::from(fails)
    );
    assert!(parked_of(b, &c).await.is_empty());
}

/// A dependency that never heals: every stage, then the parking lot with the attempt count.
pub async fn max_attempts_then_park<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("maxat"), unique("t.maxat."));
    let h = EffectHandler::new(b.clone(), &c, Fault::AlwaysTransient);
    let pol = policy(b.as_ref());
    let run = start_consumer(b, &c, &[&topic], h.clone(), pol.clone()).await;
    let env = order("m1", 1);
    b.produce(&env, &topic).await.unwrap();
    relay_all(b, "r1").await;
    let wait = ladder_total(b.as_ref()) * 2 + Duration::from_secs(20);
    assert!(
        wait_for(wait, || async { !parked_of(b, &c).await.is_empty() }).await,
        "parked after the budget"
    );
    run.stop().await;
    let parked = parked_of(b, &c).await;
    assert_eq!(parked.len(), 1);
    let p = &parked[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.attempts, pol.max_retries + 1);
    assert_eq!(p.error_class, ErrorClass::Transient);
    assert_eq!(p.error_code, "dependency_down");
    assert!(
        p.error_message.contains("budget exhausted"),
        "{}",
        p.error_message
    );
    assert_eq!(
        h.calls_for(env.id).len() as u32,
        pol.max_retries + 1,
        "no delivery beyond the budget"
    );
    assert_eq!(b.effect_count(&c, "effect:m1").await.unwrap(), 0);
}

/// A message past its business deadline is parked instead of retried.
pub async fn max_age_parks<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("maxage"), unique("t.maxage."));
    let h = EffectHandler::new(b.clone(), &c, Fault::AlwaysTransient);
    let pol = RetryPolicy {
        max_age: Some(Duration::from_secs(60)),
        ..policy(b.as_ref())
    };
    let run = start_consumer(b, &c, &[&topic], h.clone(), pol).await;
    let old = chrono::Utc::now() - chrono::Duration::seconds(120);
    let env = Envelope::builder("order.created", "conformance")
        .aggregate("order", "age1", 1)
        .occurred_at(old)
        .build();
    b.produce(&env, &topic).await.unwrap();
    relay_all(b, "r1").await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !parked_of(b, &c).await.is_empty()
        })
        .await
    );
    run.stop().await;
    let p = &parked_of(b, &c).await[0];
    assert!(p.error_message.contains("deadline"), "{}", p.error_message);
    assert_eq!(h.calls_for(env.id).len(), 1, "no retry past the deadline");
}

/// A permanent error parks on the first delivery with every diagnostic.
pub async fn permanent_error_parks_at_once<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("perm"), unique("t.perm."));
    let h = EffectHandler::new(b.clone(), &c, Fault::Permanent);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let env = order("p1", 1);
    b.produce(&env, &topic).await.unwrap();
    relay_all(b, "r1").await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !parked_of(b, &c).await.is_empty()
        })
        .await
    );
    let stats = run.stop().await;
    let p = &parked_of(b, &c).await[0];
    assert_eq!(h.calls_for(env.id).len(), 1);
    assert!(stats.retries_by_stage.is_empty());
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.consumer, c);
    assert_eq!(p.consumer_version, "conformance-1");
    assert_eq!(p.message_type.as_deref(), Some("order.created"));
    assert_eq!(p.schema_version, Some(1));
    assert_eq!(p.attempts, 1);
    assert_eq!(p.error_class, ErrorClass::Permanent);
    assert_eq!(p.error_code, "rejected_by_test");
    assert_eq!(p.correlation_id.as_deref(), Some("corr-p1"));
    assert_eq!(p.routing_key, topic);
    assert_eq!(p.producer.as_deref(), Some("conformance"));
    assert_eq!(p.status, ParkedStatus::Parked);
    assert_eq!(p.body, env.to_bytes());
}

/// Corrupt JSON and an unknown schema version are parked on the first delivery, never handled.
pub async fn corrupt_body_parks_at_once<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("corrupt"), unique("t.corrupt."));
    let h = EffectHandler::new(b.clone(), &c, Fault::None);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let bad_id = MessageId::new();
    let corrupt = OutgoingMessage {
        id: bad_id,
        route: Route::Topic(topic.clone()),
        headers: Default::default(),
        body: b"{\"id\": not json".to_vec(),
    };
    b.publisher().publish(&corrupt).await.unwrap();
    let v9 = Envelope::builder("order.created", "conformance")
        .schema_version(9)
        .aggregate("order", "v9", 1)
        .build();
    b.publisher()
        .publish(&OutgoingMessage::from_envelope(&v9, &topic))
        .await
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(20), || async {
            parked_of(b, &c).await.len() == 2
        })
        .await,
        "both parked"
    );
    let stats = run.stop().await;
    assert!(h.calls().is_empty(), "the handler never sees them");
    assert!(stats.retries_by_stage.is_empty(), "never retried");
    let parked = parked_of(b, &c).await;
    let bad = parked
        .iter()
        .find(|p| p.message_id == bad_id)
        .expect("corrupt one parked under its id");
    assert_eq!(bad.error_code, "malformed");
    assert_eq!(bad.error_class, ErrorClass::Permanent);
    assert_eq!(
        bad.body,
        b"{\"id\": not json".to_vec(),
        "the body is kept as it was"
    );
    let v = parked
        .iter()
        .find(|p| p.message_id == v9.id)
        .expect("v9 parked");
    assert_eq!(v.error_code, "unknown_schema_version");
    assert!(v.error_message.contains('9'));
}

/// An operator selects by criterion, previews, and redrives at a bounded rate; the ids are
/// recorded and each is applied once; unselected messages stay parked.
pub async fn redrive_by_criterion_at_rate<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("redrive"), unique("t.redrive."));
    let h = EffectHandler::new(b.clone(), &c, Fault::Permanent);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let selected: Vec<Envelope> = (0..3).map(|i| order(&format!("rd{i}"), 1)).collect();
    let other = Envelope::builder("order.created", "other-producer")
        .aggregate("order", "keep", 1)
        .build();
    for e in &selected {
        b.produce(e, &topic).await.unwrap();
    }
    b.produce(&other, &topic).await.unwrap();
    relay_all(b, "r1").await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            parked_of(b, &c).await.len() == 4
        })
        .await
    );
    h.set_fault(Fault::None);
    let redriver = postroom_core::Redriver::new(b.parking(), b.publisher());
    let ids: Vec<MessageId> = selected.iter().map(|e| e.id).collect();
    let filter = ParkingFilter {
        consumer: Some(c.clone()),
        ids: ids.clone(),
        ..ParkingFilter::default()
    };
    let preview = redriver.preview(&filter, 100).await.unwrap();
    assert_eq!(preview.len(), 3, "dry run shows the selection");
    assert_eq!(
        parked_of(b, &c)
            .await
            .iter()
            .filter(|p| p.status == ParkedStatus::Parked)
            .count(),
        4,
        "dry run changes nothing"
    );
    let run_rec = redriver.start(&filter, 100, "tester").await.unwrap();
    assert_eq!(run_rec.total, 3);
    let started = Instant::now();
    let mut seen = Vec::new();
    let done = redriver
        .execute(&run_rec.id, 4.0, |p| seen.push(p.done))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(done.done, 3);
    assert_eq!(seen, vec![1, 2, 3], "progress after each message");
    assert!(
        took >= Duration::from_millis(490),
        "3 messages at 4/s take at least 0.5 s, took {took:?}"
    );
    assert!(
        wait_for(Duration::from_secs(20), || async {
            let mut n = 0;
            for e in &selected {
                n += b
                    .effect_count(&c, &format!("effect:{}", e.aggregate.id))
                    .await
                    .unwrap();
            }
            n == 3
        })
        .await,
        "every redriven message applied"
    );
    run.stop().await;
    for e in &selected {
        assert_eq!(
            b.effect_count(&c, &format!("effect:{}", e.aggregate.id))
                .await
                .unwrap(),
            1
        );
        let calls = h.calls_for(e.id);
        assert_eq!(
            calls.last().unwrap().attempt,
            0,
            "a redrive gets a fresh budget"
        );
    }
    let parked = parked_of(b, &c).await;
    let still: Vec<_> = parked
        .iter()
        .filter(|p| p.status == ParkedStatus::Parked)
        .collect();
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].message_id, other.id);
    assert!(
        parked
            .iter()
            .filter(|p| p.status == ParkedStatus::Redriven)
            .all(|p| ids.contains(&p.message_id) && p.redrive_count == 1)
    );
    let runs = b.parking().redrive_runs(10).await.unwrap();
    assert!(
        runs.iter()
            .any(|r| r.id == run_rec.id && r.done == 3 && r.operator == "tester")
    );
}

/// A redrive interrupted halfway continues with what is pending; nothing applies twice.
pub async fn redrive_resumes_after_interruption<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("resume"), unique("t.resume."));
    let h = EffectHandler::new(b.clone(), &c, Fault::Permanent);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let envs: Vec<Envelope> = (0..4).map(|i| order(&format!("rs{i}"), 1)).collect();
    for e in &envs {
        b.produce(e, &topic).await.unwrap();
    }
    relay_all(b, "r1").await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            parked_of(b, &c).await.len() == 4
        })
        .await
    );
    h.set_fault(Fault::None);
    let filter = ParkingFilter {
        consumer: Some(c.clone()),
        ..ParkingFilter::default()
    };
    let redriver = Arc::new(postroom_core::Redriver::new(b.parking(), b.publisher()));
    let rec = redriver.start(&filter, 100, "tester").await.unwrap();
    let (r2, id) = (redriver.clone(), rec.id.clone());
    let first = tokio::spawn(async move { r2.execute(&id, 2.0, |_| {}).await });
    tokio::time::sleep(Duration::from_millis(1100)).await;
    first.abort();
    let partial = b
        .parking()
        .redrive_run(&rec.id)
        .await
        .unwrap()
        .unwrap()
        .done;
    assert!(
        (1..4).contains(&partial),
        "interrupted midway, done = {partial}"
    );
    let done = redriver.execute(&rec.id, 50.0, |_| {}).await.unwrap();
    assert_eq!(done.done, 4);
    assert!(
        wait_for(Duration::from_secs(20), || async {
            let mut n = 0;
            for e in &envs {
                n += b
                    .effect_count(&c, &format!("effect:{}", e.aggregate.id))
                    .await
                    .unwrap();
            }
            n == 4
        })
        .await
    );
    run.stop().await;
    for e in &envs {
        assert_eq!(
            b.effect_count(&c, &format!("effect:{}", e.aggregate.id))
                .await
                .unwrap(),
            1
        );
    }
}

/// A relay that dies between the broker's confirm and marking the row: the lease expires,
/// another relay republishes with the same id, and the inbox absorbs the copy.
pub async fn relay_crash_between_publish_and_mark<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("relaycrash"), unique("t.relaycrash."));
    let h = EffectHandler::new(b.clone(), &c, Fault::None);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let env = order("rc1", 1);
    b.produce(&env, &topic).await.unwrap();
    let claimed = b
        .outbox()
        .claim("doomed", 10, Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    b.publisher()
        .publish(&claimed[0].to_message())
        .await
        .unwrap();
    // The doomed relay dies here: no mark. Its lease runs out; another relay takes over.
    assert!(
        b.outbox()
            .claim("other", 10, Duration::from_secs(5))
            .await
            .unwrap()
            .is_empty(),
        "the lease holds"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    relay_all(b, "survivor").await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            h.calls_for(env.id).len() >= 2
        })
        .await,
        "republished"
    );
    let stats = run.stop().await;
    assert!(
        h.calls_for(env.id).iter().all(|c| c.id == env.id),
        "the copy carries the same id"
    );
    assert_eq!(b.effect_count(&c, "effect:rc1").await.unwrap(), 1);
    assert_eq!(stats.duplicates, 1);
}

/// Two relays on one outbox keep per-aggregate order: version n+1 never goes out before n.
pub async fn relay_keeps_aggregate_order<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("order"), unique("t.order."));
    let h = EffectHandler::new(b.clone(), &c, Fault::None);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    for v in 1..=10 {
        for agg in ["x", "y", "z"] {
            b.produce(&order(agg, v), &topic).await.unwrap();
        }
    }
    let (b1, b2) = (b.clone(), b.clone());
    let r1 = tokio::spawn(async move { relay_small_batches(&b1, "ra").await });
    let r2 = tokio::spawn(async move { relay_small_batches(&b2, "rb").await });
    r1.await.unwrap();
    r2.await.unwrap();
    assert!(wait_for(Duration::from_secs(30), || async { h.calls().len() >= 30 }).await);
    run.stop().await;
    assert_delivered_in_order(&h, &["x", "y", "z"], 10);
}

/// Two relays running their pipelined loops (publish batch n while marking n-1 and claiming
/// n+1) keep per-aggregate order too, and stop cleanly.
pub async fn relay_loops_keep_aggregate_order<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("loops"), unique("t.loops."));
    let h = EffectHandler::new(b.clone(), &c, Fault::None);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    for v in 1..=10 {
        for agg in ["p", "q", "r"] {
            b.produce(&order(agg, v), &topic).await.unwrap();
        }
    }
    let (stop, rx) = watch::channel(false);
    let relays: Vec<_> = ["la", "lb"]
        .into_iter()
        .map(|id| {
            let relay = OutboxRelay::new(
                b.outbox(),
                b.publisher(),
                RelayConfig {
                    relay_id: id.into(),
                    batch_size: 2,
                    idle_wait: Duration::from_millis(20),
                    ..RelayConfig::default()
                },
            );
            let rx = rx.clone();
            tokio::spawn(async move { relay.run(rx).await })
        })
        .collect();
    assert!(
        wait_for(Duration::from_secs(30), || async { h.calls().len() >= 30 }).await,
        "all published and handled"
    );
    assert!(
        wait_for(Duration::from_secs(10), || async {
            b.outbox().pending().await.unwrap() == 0
        })
        .await,
        "all marked"
    );
    stop.send(true).unwrap();
    for r in relays {
        tokio::time::timeout(Duration::from_secs(10), r)
            .await
            .expect("relay loop stops")
            .unwrap();
    }
    run.stop().await;
    assert_delivered_in_order(&h, &["p", "q", "r"], 10);
}

/// Each aggregate's versions 1..=`n` reached the handler once each, in order.
fn assert_delivered_in_order<B: Backend>(h: &EffectHandler<B>, aggregates: &[&str], n: u64) {
    for agg in aggregates {
        let versions: Vec<u64> = h
            .calls()
            .iter()
            .filter(|c| c.aggregate.0 == format!("order:{agg}"))
            .map(|c| c.aggregate.1)
            .collect();
        assert_eq!(
            versions,
            (1..=n).collect::<Vec<_>>(),
            "aggregate {agg} delivered in order"
        );
    }
}

async fn relay_small_batches<B: Backend>(b: &Arc<B>, id: &str) {
    let relay = OutboxRelay::new(
        b.outbox(),
        b.publisher(),
        RelayConfig {
            relay_id: id.into(),
            batch_size: 2,
            ..RelayConfig::default()
        },
    );
    for _ in 0..2000 {
        let pass = relay.run_once().await.expect("relay pass");
        if pass.claimed == 0 {
            if b.outbox().pending().await.unwrap() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    panic!("relays did not drain the outbox");
}

/// A business outcome is acknowledged: no retry, no parking, no redelivery.
pub async fn business_outcome_is_acked<B: Backend>(b: &Arc<B>) {
    let (c, topic) = (unique("biz"), unique("t.biz."));
    let h = EffectHandler::new(b.clone(), &c, Fault::BusinessOutcome);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b.as_ref())).await;
    let env = order("b1", 1);
    b.produce(&env, &topic).await.unwrap();
    relay_all(b, "r1").await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !h.calls_for(env.id).is_empty()
        })
        .await
    );
    tokio::time::sleep(
        b.caps().redelivery_after + b.caps().ladder.delay(0) + Duration::from_millis(500),
    )
    .await;
    let stats = run.stop().await;
    assert_eq!(h.calls_for(env.id).len(), 1);
    assert_eq!(stats.business_outcomes, 1);
    assert!(parked_of(b, &c).await.is_empty());
}
