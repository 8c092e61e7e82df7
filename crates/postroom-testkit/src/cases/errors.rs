//! Error classes end to end: a handler that outlives its timeout is a transient failure and
//! is retried; an unclassified error gets its few bounded retries, then the parking lot.

use super::*;
use crate::effect::Fault;
use postroom_core::ErrorClass;
use postroom_core::outcome::codes;

/// A handler call that outlives the handler timeout is abandoned (nothing committed) and
/// retried as a transient failure; the next attempt applies the effect once.
pub async fn handler_timeout_retries_as_transient(b: &Arc<Backend>) {
    let (c, topic) = (unique("slow"), unique("t.slow."));
    let timeout = Duration::from_millis(400);
    let h = EffectHandler::new(b.clone(), &c, Fault::SlowTimes(1, timeout * 5));
    let run = start_consumer_with(b, &c, &[&topic], h.clone(), policy(b), |cfg| {
        cfg.handler_timeout = timeout;
    })
    .await;
    let env = produce_and_relay(b, &topic, "slow1").await;
    until(ladder_walk(b), "applied on the retry", || async {
        b.effect_count(&c, "effect:slow1").await.unwrap() == 1
    })
    .await;
    let recorder = run.recorder();
    let stats = run.stop().await;
    assert_eq!(
        h.calls_for(env.id).len(),
        2,
        "one timed-out call, one retry"
    );
    assert_eq!(
        stats.retries_by_stage.get(&0),
        Some(&1),
        "retried once, at stage 0"
    );
    assert_eq!(stats.applied, 1);
    assert_eq!(recorder.assert_never_early(env.id), 1);
    assert!(parked_of(b, &c).await.is_empty());
}

/// An unclassified error is retried at most `max_unknown_retries` times, then parked with
/// class `unknown` and its code.
pub async fn unknown_error_bounded_then_parked(b: &Arc<Backend>) {
    let (c, topic) = (unique("unknown"), unique("t.unknown."));
    let h = EffectHandler::new(b.clone(), &c, Fault::Unknown);
    let pol = policy(b);
    assert!(
        pol.max_unknown_retries < pol.max_retries,
        "the suite's policy bounds unknown errors tighter"
    );
    let run = start_consumer(b, &c, &[&topic], h.clone(), pol.clone()).await;
    let env = produce_and_relay(b, &topic, "u1").await;
    let parked = wait_parked(
        b,
        &c,
        1,
        ladder_walk(b),
        "parked after its unknown-error retries",
    )
    .await;
    run.stop().await;
    assert_eq!(
        h.calls_for(env.id).len() as u32,
        pol.max_unknown_retries + 1,
        "no call beyond the unknown-error budget"
    );
    let p = &parked[0];
    assert_eq!(p.error_class, ErrorClass::Unknown);
    assert_eq!(p.error_code, "mystery");
    assert_eq!(p.attempts, pol.max_unknown_retries + 1);
    assert_ne!(p.error_code, codes::HANDLER_PANIC);
}

/// A message one byte over the largest body `transport` takes fails alone, as invalid data (a
/// retry cannot help it, and the relay holds such a row with its reason), and the messages
/// published beside it in the same batch are confirmed: the oversize one never reaches the
/// broker, where it could break the link under its batch mates. `topic` must be bound.
pub async fn a_message_over_the_transports_limit_fails_alone(
    transport: &dyn postroom_core::Transport,
    topic: &str,
) {
    use postroom_core::{ErrorKind, OutgoingMessage};
    let limit = transport.capabilities().max_message_bytes;
    let mut huge = OutgoingMessage::from_envelope(&order("huge", 1), topic);
    huge.body = vec![b'x'; limit + 1];
    let batch = vec![
        OutgoingMessage::from_envelope(&order("beside-1", 1), topic),
        huge,
        OutgoingMessage::from_envelope(&order("beside-2", 1), topic),
    ];
    let results = transport.publisher().publish_batch(&batch).await;
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(results[2].is_ok(), "{:?}", results[2]);
    let e = results[1].as_ref().expect_err("over the limit");
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
}
