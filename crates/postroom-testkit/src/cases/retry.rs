//! Retries and parking: the ladder is walked and never early, the budget and the deadline
//! park, permanent errors and undecodable bodies park at once with every diagnostic.

use super::*;
use crate::effect::Fault;
use postroom_core::{ErrorClass, MessageId, OutgoingMessage, ParkedStatus, Route};

/// Transient failures walk the ladder; no retry arrives before its due time (when the failure
/// was settled plus the delay the transport keeps); the message is applied once when the
/// dependency heals.
pub async fn retry_ladder_never_earlier_than_stage(b: &Arc<Backend>) {
    let (c, topic) = (unique("ladder"), unique("t.ladder."));
    let fails = b.caps().ladder.len() as u32;
    let h = EffectHandler::new(b.clone(), &c, Fault::TransientTimes(fails));
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b)).await;
    let env = produce_and_relay(b, &topic, "l1").await;
    until(ladder_walk(b), "all attempts made", || async {
        h.calls_for(env.id).len() as u32 > fails
    })
    .await;
    let run_recorder = run.recorder();
    let stats = run.stop().await;
    let calls = h.calls_for(env.id);
    assert_eq!(
        calls.len() as u32,
        fails + 1,
        "one call per attempt, no hot loop"
    );
    for pair in calls.windows(2) {
        assert_eq!(
            pair[1].attempt,
            pair[0].attempt + 1,
            "attempt counter increments by one"
        );
    }
    assert_eq!(
        run_recorder.assert_never_early(env.id),
        fails as usize,
        "every retry measured against its due time"
    );
    assert_eq!(b.effect_count(&c, "effect:l1").await.unwrap(), 1);
    assert_eq!(
        stats.retries_by_stage.values().sum::<u64>(),
        u64::from(fails)
    );
    assert!(parked_of(b, &c).await.is_empty());
}

/// A dependency that never heals: every stage, then the parking lot with the attempt count.
pub async fn max_attempts_then_park(b: &Arc<Backend>) {
    let (c, topic) = (unique("maxat"), unique("t.maxat."));
    let h = EffectHandler::new(b.clone(), &c, Fault::AlwaysTransient);
    let pol = policy(b);
    let run = start_consumer(b, &c, &[&topic], h.clone(), pol.clone()).await;
    let env = produce_and_relay(b, &topic, "m1").await;
    let parked = wait_parked(b, &c, 1, ladder_walk(b), "parked after the budget").await;
    let recorder = run.recorder();
    run.stop().await;
    assert_eq!(
        recorder.assert_never_early(env.id),
        pol.max_retries as usize,
        "every retry measured against its due time"
    );
    let p = &parked[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.error_class, ErrorClass::Transient);
    assert_parked_for(
        p,
        "dependency_down",
        pol.max_retries + 1,
        "budget exhausted",
    );
    assert_eq!(
        h.calls_for(env.id).len() as u32,
        pol.max_retries + 1,
        "no delivery beyond the budget"
    );
    assert_eq!(b.effect_count(&c, "effect:m1").await.unwrap(), 0);
}

/// A message past its business deadline is parked instead of retried.
pub async fn max_age_parks(b: &Arc<Backend>) {
    let (c, topic) = (unique("maxage"), unique("t.maxage."));
    let h = EffectHandler::new(b.clone(), &c, Fault::AlwaysTransient);
    let pol = RetryPolicy {
        max_age: Some(Duration::from_secs(60)),
        ..policy(b)
    };
    let run = start_consumer(b, &c, &[&topic], h.clone(), pol).await;
    let old = chrono::Utc::now() - chrono::Duration::seconds(120);
    let env = Envelope::builder("order.created", "conformance")
        .aggregate("order", "age1", 1)
        .occurred_at(old)
        .build();
    b.produce(&env, &topic).await.unwrap();
    relay_all(b, "r1").await;
    let parked = wait_parked(b, &c, 1, Duration::from_secs(20), "parked past its age").await;
    run.stop().await;
    let p = &parked[0];
    assert!(p.error_message.contains("deadline"), "{}", p.error_message);
    assert_eq!(h.calls_for(env.id).len(), 1, "no retry past the deadline");
}

/// A permanent error parks on the first delivery with every diagnostic.
pub async fn permanent_error_parks_at_once(b: &Arc<Backend>) {
    let (c, topic, h, run) = consume(b, "perm", Fault::Permanent).await;
    let env = produce_and_relay(b, &topic, "p1").await;
    let parked = wait_parked(b, &c, 1, Duration::from_secs(20), "parked at once").await;
    let stats = run.stop().await;
    let p = &parked[0];
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
pub async fn corrupt_body_parks_at_once(b: &Arc<Backend>) {
    let (c, topic, h, run) = consume(b, "corrupt", Fault::None).await;
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
    until(Duration::from_secs(20), "both parked", || async {
        parked_of(b, &c).await.len() == 2
    })
    .await;
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
