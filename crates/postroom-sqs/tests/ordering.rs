//! Per-aggregate order on FIFO queues: the message group is the aggregate key, and a retry
//! hides the failed message, which holds back the rest of its group until it is handled —
//! ordered retry per aggregate. The same scenario on a standard queue reorders, which shows the
//! check below catches a broken order. And a relay that dies after sending and before marking
//! sends again: on FIFO, SQS's deduplication by message id drops the second send.

mod common;

use common::probe::{Call, Mode, Probe, config, policy, run, store_at};
use common::{TestSqs, eventually, order, subscriber_of};
use postroom_core::consumer::{Consumer, Ordering};
use postroom_core::{OutgoingMessage, Transport};
use postroom_testkit::cases::publish_all;
use std::time::Duration;

const AGGREGATES: [&str; 2] = ["a", "b"];
const VERSIONS: u64 = 5;

/// What breaks per-aggregate order in `calls`: a version handled (any call) before an earlier
/// version of its aggregate was applied, or versions applied out of order.
fn order_violations(calls: &[Call]) -> Vec<String> {
    let mut out = Vec::new();
    for agg in AGGREGATES {
        let key = format!("order:{agg}");
        let mine: Vec<&Call> = calls.iter().filter(|c| c.key == key).collect();
        let applied: Vec<u64> = mine
            .iter()
            .filter(|c| c.outcome == "applied")
            .map(|c| c.version)
            .collect();
        if applied != (1..=VERSIONS).collect::<Vec<_>>() {
            out.push(format!("{agg}: applied in the order {applied:?}"));
        }
        for c in &mine {
            let earlier_pending = mine.iter().any(|e| {
                e.version < c.version
                    && !mine
                        .iter()
                        .any(|a| a.version == e.version && a.outcome == "applied" && a.at <= c.at)
            });
            if earlier_pending {
                out.push(format!(
                    "{agg}: version {} handled (attempt {}) before an earlier version was applied",
                    c.version, c.attempt
                ));
            }
        }
    }
    out
}

/// Publish versions 1..=5 of two aggregates in one batch; version 2 fails once (its retry
/// waits 1 s); a per-key consumer handles them. The calls it made.
async fn retry_scenario(fifo: bool) -> Vec<Call> {
    let t = TestSqs::new().await;
    let mut cfg = t.config();
    cfg.fifo = fifo;
    let transport = t.transport(cfg).await;
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::with_inbox(
        store_at(&dir.path().join("o.db")).await,
        "ordered",
        Mode::FailVersionBelow(2, 1),
    );
    let consumer = Consumer::for_transport(
        config("ordered", policy("1s", 3), 4, Ordering::PerKey),
        probe.clone(),
        &transport.capabilities(),
    )
    .unwrap();
    let sub = subscriber_of(&transport, "ordered", &["order.created"], 10).await;
    let mut messages = Vec::new();
    for v in 1..=VERSIONS {
        for agg in AGGREGATES {
            messages.push(OutgoingMessage::from_envelope(
                &order(agg, v),
                "order.created",
            ));
        }
    }
    publish_all(transport.publisher().as_ref(), &messages).await;
    let running = run(consumer, sub);
    let all = AGGREGATES.len() as u64 * VERSIONS;
    assert!(
        eventually(Duration::from_secs(30), || async {
            probe
                .calls()
                .iter()
                .filter(|c| c.outcome == "applied")
                .count() as u64
                == all
        })
        .await,
        "every version applied: {:?}",
        probe.calls()
    );
    running.stop().await;
    probe.calls()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_groups_keep_aggregate_order_through_a_retry() {
    let calls = retry_scenario(true).await;
    assert_eq!(
        calls.iter().filter(|c| c.outcome == "failed").count(),
        2,
        "version 2 of each aggregate failed once"
    );
    let violations = order_violations(&calls);
    assert!(violations.is_empty(), "order broken: {violations:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_queue_reorders_on_retry_and_the_check_sees_it() {
    let calls = retry_scenario(false).await;
    let violations = order_violations(&calls);
    assert!(
        !violations.is_empty(),
        "on a standard queue later versions overtake the retried one: {calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_after_send_before_mark_is_deduplicated_on_fifo() {
    use postroom_testkit::cases::{
        order as suite_order, policy as suite_policy, relay_all, start_consumer, wait_for,
    };
    use postroom_testkit::{Backend, EffectHandler, Fault};
    use std::sync::Arc;

    let t = TestSqs::new().await;
    let mut cfg = t.config();
    cfg.fifo = true;
    let transport = t.transport(cfg).await;
    let b = Arc::new(
        Backend::on_sqlite(transport.clone(), "1s,2s", Duration::from_secs(2))
            .await
            .keeping(t),
    );
    let env = suite_order("frc1", 1);
    // The consumer's queue is bound before anything is sent; the consumer starts later.
    transport
        .bind(&postroom_core::Subscription::new(
            "fifo-relay",
            &["order.created"],
        ))
        .await
        .unwrap();
    b.produce(&env, "order.created").await.unwrap();
    let claimed = b
        .outbox()
        .claim("doomed", 10, Duration::from_millis(300))
        .await
        .unwrap();
    b.publisher()
        .publish(&claimed[0].to_message())
        .await
        .unwrap();
    // The doomed relay dies here, before marking; its lease runs out and another relay sends
    // the row again, with the same id, while the first copy still waits in the queue (moto
    // forgets a deduplication id once its message is deleted; SQS keeps it five minutes).
    tokio::time::sleep(Duration::from_millis(400)).await;
    relay_all(&b, "survivor").await;
    assert_eq!(b.outbox().pending().await.unwrap(), 0);
    let h = EffectHandler::new(b.clone(), "fifo-relay", Fault::None);
    let running = start_consumer(
        &b,
        "fifo-relay",
        &["order.created"],
        h.clone(),
        suite_policy(&b),
    )
    .await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !h.calls_for(env.id).is_empty()
        })
        .await
    );
    // Longer than the visibility timeout: a second copy would have been handled by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stats = running.stop().await;
    assert_eq!(h.calls_for(env.id).len(), 1, "SQS dropped the second send");
    assert_eq!((stats.applied, stats.duplicates), (1, 0));
    assert_eq!(
        b.effect_count("fifo-relay", "effect:frc1").await.unwrap(),
        1
    );
    assert_eq!(b.outbox().pending().await.unwrap(), 0);
}
