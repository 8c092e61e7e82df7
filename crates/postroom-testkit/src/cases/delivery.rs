//! Delivery and acknowledgement: duplicates absorbed by the inbox, ack only after the
//! commit, business outcomes acknowledged.

use super::*;
use crate::effect::Fault;
use postroom_core::{OutgoingMessage, Subscriber as _};

/// A duplicate delivery of the same id commits nothing new and is acknowledged.
pub async fn dedup_absorbs_duplicate_delivery(b: &Arc<Backend>) {
    let (c, topic, h, run) = consume(b, "dedup", Fault::None).await;
    let env = produce_and_relay(b, &topic, "d1").await;
    b.publisher()
        .publish(&OutgoingMessage::from_envelope(&env, &topic))
        .await
        .unwrap();
    until(Duration::from_secs(20), "both copies handled", || async {
        h.calls_for(env.id).len() >= 2
    })
    .await;
    let stats = run.stop().await;
    assert_eq!(
        b.effect_count(&c, "effect:d1").await.unwrap(),
        1,
        "one effect"
    );
    assert_eq!(stats.duplicates, 1);
    assert_eq!(stats.applied, 1);
}

/// A consumer that crashes between its handler's commit and the ack gets the message again;
/// the inbox makes the repeat harmless; once acked it is not delivered again. The crash is the
/// real consumer loop's, at the crash point between commit and ack (the worker handling the
/// delivery panics there, so the ack is never sent).
pub async fn ack_only_after_commit(b: &Arc<Backend>) {
    use postroom_core::failpoint::{self, Action};
    let (c, topic) = (unique("ackc"), unique("t.ack."));
    failpoint::arm_for(
        failpoint::CONSUMER_BEFORE_ACK,
        &c,
        Action::Panic,
        0,
        Some(1),
    );
    let h = EffectHandler::new(b.clone(), &c, Fault::None);
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b)).await;
    let env = produce_and_relay(b, &topic, "a1").await;
    until_reached(
        failpoint::CONSUMER_BEFORE_ACK,
        &c,
        "the handler committed and the worker reached the point before its ack",
    )
    .await;
    assert_eq!(b.effect_count(&c, "effect:a1").await.unwrap(), 1);
    // The process of this consumer is gone: stop the loop (its channel, lease or fetch goes
    // with it) and start the consumer again.
    let first = run.stop().await;
    assert_eq!(
        first.applied, 1,
        "the effect was committed before the crash"
    );
    let run = start_consumer(b, &c, &[&topic], h.clone(), policy(b)).await;
    let wait = b.caps().redelivery_after * 3 + Duration::from_secs(10);
    until(
        wait,
        "redelivered after the crash: it was never acked",
        || async { h.calls_for(env.id).len() >= 2 },
    )
    .await;
    until(
        Duration::from_secs(10),
        "the redelivery is absorbed as a duplicate",
        || async { run.stats().duplicates == 1 },
    )
    .await;
    let stats = run.stop().await;
    assert_eq!(stats.applied, 0, "nothing applied twice");
    assert_eq!(b.effect_count(&c, "effect:a1").await.unwrap(), 1);
    // Acked now: nothing comes back.
    let mut sub = b.subscribe(&c, &[&topic]).await.unwrap();
    let again = next_within(&mut sub, b.caps().redelivery_after + Duration::from_secs(1)).await;
    assert!(again.is_none(), "an acked message is not delivered again");
    sub.close().await;
}

/// A business outcome is acknowledged: no retry, no parking, no redelivery.
pub async fn business_outcome_is_acked(b: &Arc<Backend>) {
    let (c, topic, h, run) = consume(b, "biz", Fault::BusinessOutcome).await;
    let env = produce_and_relay(b, &topic, "b1").await;
    until(Duration::from_secs(20), "the first delivery", || async {
        !h.calls_for(env.id).is_empty()
    })
    .await;
    tokio::time::sleep(
        b.caps().redelivery_after + b.caps().ladder.delay(0) + Duration::from_millis(500),
    )
    .await;
    let stats = run.stop().await;
    assert_eq!(h.calls_for(env.id).len(), 1);
    assert_eq!(stats.business_outcomes, 1);
    assert!(parked_of(b, &c).await.is_empty());
}

/// Messages from a producer that is not postroom — a plain JSON body, its id a string in a
/// header — are consumed like any other: two copies of one id apply once, a transient
/// failure is retried, a message without its id header is parked.
pub async fn foreign_messages_are_deduplicated_retried_and_parked(b: &Arc<Backend>) {
    use postroom_core::{ForeignFormat, Headers, MessageId, Route};
    let (c, topic) = (unique("foreign"), unique("t.foreign."));
    let h = EffectHandler::new(b.clone(), &c, Fault::TransientTimes(1));
    let run = start_consumer_with(b, &c, &[&topic], h.clone(), policy(b), |cfg| {
        cfg.decoder = cfg
            .decoder
            .clone()
            .foreign(ForeignFormat::new("x-external-id", "payment.captured").key_field("payment"));
    })
    .await;
    let foreign = |id: Option<&str>, payment: &str| {
        let mut headers = Headers::new();
        if let Some(id) = id {
            headers.insert("x-external-id".into(), id.into());
        }
        OutgoingMessage {
            // The transport's own id differs on every copy, as another producer's would.
            id: MessageId::new(),
            route: Route::Topic(topic.clone()),
            headers,
            body: format!(r#"{{"payment":"{payment}","amount":12}}"#).into_bytes(),
        }
    };
    for m in [
        foreign(Some("pay-0042"), "p-42"),
        foreign(Some("pay-0042"), "p-42"),
        foreign(None, "p-none"),
    ] {
        b.publisher().publish(&m).await.unwrap();
    }
    until(
        ladder_walk(b),
        "applied once, the copy absorbed, the one without an id parked",
        || async {
            b.effect_count(&c, "effect:p-42").await.unwrap() == 1
                && run.stats().duplicates == 1
                && !parked_of(b, &c).await.is_empty()
        },
    )
    .await;
    let stats = run.stop().await;
    assert_eq!(stats.applied, 1);
    assert_eq!(
        stats.retries_by_stage.values().sum::<u64>(),
        2,
        "each copy failed once and was retried"
    );
    let parked = parked_of(b, &c).await;
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].error_code, "missing_id");
    assert_eq!(b.effect_count(&c, "effect:p-42").await.unwrap(), 1);
}
