//! The source article's fault tests at the transport level, against the real broker: a
//! deleted retry binding, corrupt JSON, an unavailable parking queue, the reject+DLX loop,
//! and a consumer that keeps dying.

mod common;

use common::probe::{Mode, Probe, policy, run_probe};
use common::{TestRabbit, eventually, parked, parking_workload, publish_order, sqlite};
use postroom_core::{
    BacklogProbe, ErrorClass, MessageId, OutgoingMessage, Publisher, Route, Subscriber,
};
use postroom_rabbitmq::{RabbitBacklog, RetryStyle};
use postroom_testkit::recording::BROKER_CLOCK_RATE;
use std::time::{Duration, Instant};

/// The retry binding is gone: the retry publish comes back (basic.return), the original is
/// not acked and comes back after a channel rebuild; rebuilds are spaced out by a growing
/// backoff (no reconnect storm). Once the binding is back, the message walks on and applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_binding_deleted_keeps_the_original_without_a_reconnect_storm() {
    let t = TestRabbit::new("1s").await;
    let topo = t.add_consumer("rb", &["order.created"]).await;
    let n = topo.names("rb");
    t.unbind(&n.retry_exchange, "1s").await;
    let publisher = t.publisher();
    let probe = Probe::new(Mode::FailBelow(1));
    let running = run_probe(&t, "rb", 1, &publisher, &probe, policy("1s", 3), 1);
    let env = publish_order(publisher.as_ref(), "rb1").await;

    // Five deliveries of the original: four rebuild pauses. The subscriber's rebuild backoff
    // starts at 0.5 s and doubles, jittered in [d/2, d]: the k-th pause is at least
    // 0.25 s x 2^k, so every gap must clear a floor that doubles at every step.
    const DELIVERIES: usize = 5;
    assert!(
        eventually(Duration::from_secs(60), || async {
            probe.calls_for(env.id).len() >= DELIVERIES
        })
        .await,
        "the unacked original came back after each rebuild: {} deliveries in 60 s",
        probe.calls_for(env.id).len()
    );
    let stats = t.broker.stats();
    let calls = probe.calls_for(env.id);
    assert!(stats.unroutable() >= 1, "the retry publish was returned");
    assert!(
        calls.iter().all(|c| c.attempt == 0),
        "no retry ever reached a stage"
    );
    let rebuilds = stats.channel_rebuilds();
    assert!(
        rebuilds >= DELIVERIES as u64 - 1 && rebuilds <= calls.len() as u64,
        "{rebuilds} channel rebuilds for {} deliveries: one per failed settle, not a storm",
        calls.len()
    );
    // From the return of one delivery's handler (its settle failed after it) to the next.
    let gaps: Vec<Duration> = calls
        .windows(2)
        .map(|w| w[1].at - w[0].done.expect("the handler returned"))
        .collect();
    for (k, gap) in gaps.iter().take(DELIVERIES - 1).enumerate() {
        let floor = Duration::from_millis(250) * (1 << k);
        assert!(
            *gap >= floor,
            "pause {k} is {gap:?}, below its backoff floor {floor:?}: the pause must grow at every step ({gaps:?})"
        );
    }
    eprintln!("{rebuilds} rebuilds; delivery gaps {gaps:?}");

    // Heal: apply restores the binding; the next retry publish is routed and confirmed.
    let plan = topo.apply().await.unwrap();
    assert_eq!(plan.len(), 1, "only the binding was missing: {plan:?}");
    assert!(
        eventually(Duration::from_secs(40), || async {
            probe.calls_for(env.id).iter().any(|c| c.attempt == 1)
        })
        .await
    );
    running.stop().await;
    let calls = probe.calls_for(env.id);
    assert_eq!(
        calls.iter().filter(|c| c.attempt == 1).count(),
        1,
        "applied once after the stage"
    );
}

/// A corrupt body is parked on its first delivery with diagnostics; the handler never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_json_is_parked_on_first_delivery() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("cj", &["order.*"]).await;
    let (store, _dir) = sqlite().await;
    let publisher = t.publisher();
    let probe = Probe::new(Mode::Ok);
    let running = run_probe(&t, "cj", 2, &publisher, &probe, policy("1s", 3), 1);
    let id = MessageId::new();
    let mut headers = postroom_core::Headers::new();
    headers.insert("x-correlation-id".into(), "corr-bad".into());
    let bad = OutgoingMessage {
        id,
        route: Route::Topic("order.created".into()),
        headers,
        body: b"{\"id\": not json".to_vec(),
    };
    publisher.publish(&bad).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            !parked(&t, "cj", &store).await.is_empty()
        })
        .await
    );
    running.stop().await;
    let p = &parked(&t, "cj", &store).await[0];
    assert_eq!(p.message_id, id);
    assert_eq!(p.error_code, "malformed");
    assert_eq!(p.error_class, ErrorClass::Permanent);
    assert_eq!(p.attempts, 1);
    assert_eq!(p.body, bad.body);
    assert_eq!(p.routing_key, "order.created");
    assert_eq!(p.consumer_version, "test-1");
    assert_eq!(p.correlation_id.as_deref(), Some("corr-bad"));
    assert!(probe.calls().is_empty());
    assert!(t.broker.stats().channel_rebuilds() == 0, "nothing failed");
}

/// The parking queue is unreachable (its binding deleted): the park publish is returned, the
/// source keeps the message and the backlog shows it; once repaired it is parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parking_unavailable_keeps_the_message_in_the_source() {
    let (t, store, _dir, publisher) = parking_workload("pu").await;
    let topo = t.topology();
    let n = topo.names("pu");
    t.unbind(&n.dlx_exchange, postroom_rabbitmq::naming::PARKING_KEY)
        .await;
    let probe = Probe::new(Mode::Permanent);
    let running = run_probe(&t, "pu", 1, &publisher, &probe, policy("1s", 3), 1);
    let env = publish_order(publisher.as_ref(), "pu1").await;
    assert!(
        eventually(Duration::from_secs(15), || async {
            probe.calls_for(env.id).len() >= 2
        })
        .await,
        "redelivered, not lost"
    );
    assert!(t.broker.stats().unroutable() >= 1);
    running.stop().await;

    let backlog = RabbitBacklog::new(t.api.clone(), t.prefix.clone());
    assert!(
        eventually(Duration::from_secs(20), || async {
            backlog.backlog("pu").await.unwrap().ready == 1
        })
        .await,
        "the source holds the message and the backlog shows it"
    );
    assert_eq!(backlog.parked("pu").await.unwrap(), 0);
    assert!(parked(&t, "pu", &store).await.is_empty());

    topo.apply().await.unwrap();
    let running = run_probe(&t, "pu", 1, &publisher, &probe, policy("1s", 3), 1);
    assert!(
        eventually(Duration::from_secs(20), || async {
            !parked(&t, "pu", &store).await.is_empty()
        })
        .await
    );
    running.stop().await;
    assert_eq!(parked(&t, "pu", &store).await[0].message_id, env.id);
}

/// reject+DLX: the consumer rejects, the work queue's policy dead-letters into the stage, the
/// stage's TTL sends it back. The delay is the broker's; the loop count comes from x-death;
/// the budget ends it in the parking lot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_dlx_loops_with_the_broker_delay_and_is_bounded() {
    let t = TestRabbit::new("1s").await;
    t.configure(|c| c.retry_style = RetryStyle::RejectDlx);
    t.add_consumer("rj", &["order.created"]).await;
    let (store, _dir) = sqlite().await;
    let publisher = t.publisher();
    let probe = Probe::new(Mode::Transient);
    let running = run_probe(&t, "rj", 1, &publisher, &probe, policy("1s", 3), 1);
    let env = publish_order(publisher.as_ref(), "rj1").await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            !parked(&t, "rj", &store).await.is_empty()
        })
        .await,
        "parked"
    );
    running.stop().await;
    let calls = probe.calls_for(env.id);
    assert_eq!(
        calls.iter().map(|c| c.attempt).collect::<Vec<_>>(),
        vec![0, 1, 2, 3],
        "attempts from x-death"
    );
    // Measured from the return of the failed attempt (the rejection comes after it), on this
    // process's clock: the broker's may run up to BROKER_CLOCK_RATE faster while it keeps the
    // delay.
    for w in calls.windows(2) {
        let waited = w[1].at - w[0].done.expect("the handler returned");
        assert!(
            waited >= Duration::from_secs(1).mul_f64(1.0 - BROKER_CLOCK_RATE),
            "the broker's TTL is the delay: attempt {} came {waited:?} after the failure",
            w[1].attempt
        );
    }
    let p = &parked(&t, "rj", &store).await[0];
    assert_eq!(p.attempts, 4);
    assert!(
        p.error_message.contains("budget exhausted"),
        "{}",
        p.error_message
    );
}

/// A consumer that dies on a message every time (never settling it): the quorum queue's
/// delivery limit dead-letters it into the parking lot, where the broker's x-death explains it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_message_is_bounded_by_the_delivery_limit() {
    let t = TestRabbit::new("1s").await;
    t.configure(|c| c.delivery_limit = 2);
    t.add_consumer("dl", &["order.created"]).await;
    let (store, _dir) = sqlite().await;
    let publisher = t.publisher();
    let env = publish_order(publisher.as_ref(), "dl1").await;
    let started = Instant::now();
    let mut deliveries = 0;
    while started.elapsed() < Duration::from_secs(20) {
        let mut sub = t.subscriber("dl", 1, publisher.clone());
        match sub.next(Duration::from_secs(2)).await.unwrap() {
            // The consumer "crashes": the delivery and its channel go away unsettled.
            Some(d) => {
                deliveries += 1;
                drop(d);
                drop(sub);
            }
            None => break,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(deliveries, 3, "delivery-limit 2 allows 3 deliveries");
    let got = parked(&t, "dl", &store).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message_id, env.id);
    assert_eq!(got[0].error_code, "delivery_limit");
    assert_eq!(got[0].consumer, "dl");
}
