//! Retries on JetStream: a delayed nak per stage, never early, the ladder walked and then
//! parked with its diagnostics, and delayed naks (which stay pending) not stalling a consumer
//! whose `max_ack_pending` is sized for them.

mod common;

use common::probe::{Mode, Probe, policy, run_on_orders};
use common::{
    TestNats, bind_to_orders, eventually, next_delivery, order, parks_one_within, publish_orders,
    subscribe_to_orders,
};
use postroom_core::{Delivery, ErrorClass, ParkingFilter, RetryPlan, Subscriber, Transport};
use postroom_testkit::StoreFixture;
use postroom_testkit::cases::assert_parked_for;
use postroom_testkit::cases::publish_to;
use postroom_testkit::stores::sqlite::SqliteFixture;
use std::time::{Duration, Instant};

fn plan(attempt: u32, delay: Duration) -> RetryPlan {
    RetryPlan {
        attempt,
        stage: attempt as usize - 1,
        stage_delay: delay,
        delay,
        error_class: ErrorClass::Transient,
        error_code: "dependency_down".into(),
        error_message: "injected".into(),
    }
}

/// Every redelivery comes no earlier than the moment its delayed nak was sent plus the delay,
/// also with an ack-wait backoff configured (2.9 measures a delayed nak against the backoff
/// entry of the delivery, which is why entries may not decrease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_redelivery_comes_before_its_due_time() {
    let nats = TestNats::new().await;
    let mut cfg = nats.config();
    cfg.ack_wait = Duration::from_secs(1);
    cfg.backoff = vec![Duration::from_secs(1), Duration::from_secs(2)];
    let transport = nats.transport(cfg);
    let mut sub = subscribe_to_orders(&transport, "early", 1).await;
    let env = order("e1", 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    let delays = [300u64, 1500, 700, 2500].map(Duration::from_millis);
    let mut d = sub
        .next(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("first delivery");
    for (k, delay) in delays.iter().enumerate() {
        let attempt = k as u32;
        assert_eq!(
            d.message().attempt(),
            attempt,
            "attempt derived from the delivery count"
        );
        assert_eq!(d.message().deliveries, Some(attempt + 1));
        let sent = Instant::now();
        d.retry(&plan(attempt + 1, *delay))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        let missing = format!("redelivery {k} never came");
        let next = next_delivery(&mut sub, sent, Duration::from_secs(20), &missing).await;
        let gap = sent.elapsed();
        println!("delayed nak {k}: delay {delay:?}, redelivered after {gap:?}");
        assert!(
            gap >= *delay,
            "redelivery {k} after {gap:?}, due after {delay:?}"
        );
        d = next;
    }
    assert_eq!(d.message().attempt(), delays.len() as u32);
    d.ack().await.map_err(|(e, _)| e).unwrap();
}

/// A database down longer than the budget: a delayed nak at each stage (no hot loop, each
/// gap at least its stage), then parked with its diagnostics, which the parking ingest
/// stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_down_past_the_budget_walks_the_ladder_then_parks_with_diagnostics() {
    let nats = TestNats::new().await;
    let transport = nats.transport(nats.config());
    let probe = Probe::new(Mode::Transient);
    let ladder = ["500ms", "1s", "2s"];
    let running = run_on_orders(
        &transport,
        "db",
        probe.clone(),
        policy(&ladder.join(","), 3),
        2,
    )
    .await;
    let env = order("down", 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    let store = SqliteFixture::fresh().await;
    let parking = store.parking();
    assert!(
        parks_one_within(transport.as_ref(), "db", &parking, Duration::from_secs(30)).await,
        "parked after the budget"
    );
    running.stop().await;
    let calls = probe.calls_for(env.id);
    assert_eq!(calls.len(), 4, "first delivery and three retries, no more");
    for (k, pair) in calls.windows(2).enumerate() {
        assert_eq!(pair[1].attempt, pair[0].attempt + 1);
        let stage = postroom_core::retry::ladder::parse_duration(ladder[k]).unwrap();
        assert!(
            pair[1].at - pair[0].at >= stage,
            "stage {k} early: {:?}",
            pair[1].at - pair[0].at
        );
    }
    let p = &parking.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(p.message_id, env.id);
    assert_eq!(p.consumer, "db");
    assert_eq!(p.error_class, ErrorClass::Transient);
    assert_parked_for(p, "dependency_down", 4, "budget exhausted");
    assert_eq!(p.routing_key, "order.created");
    assert_eq!(p.correlation_id.as_deref(), Some("corr-down"));
    assert!(
        p.parked_at - p.first_failure_at >= chrono::Duration::milliseconds(3000),
        "the first failure time survives the delayed naks: {} .. {}",
        p.first_failure_at,
        p.parked_at
    );
    assert_eq!(p.body, env.to_bytes());
}

async fn good_handled_while_bad_wait(max_ack_pending: u32, wait: Duration) -> usize {
    let nats = TestNats::new().await;
    let mut cfg = nats.config();
    cfg.max_ack_pending = max_ack_pending;
    let transport = nats.transport(cfg);
    bind_to_orders(&transport, "long").await;
    let publisher = transport.publisher();
    publish_orders(publisher.as_ref(), "bad", 40).await;
    publish_orders(publisher.as_ref(), "good", 10).await;
    let probe = Probe::new(Mode::FailKeysWith("bad"));
    let running = run_on_orders(&transport, "long", probe.clone(), policy("60s,120s", 2), 4).await;
    let good = || {
        probe
            .calls()
            .iter()
            .filter(|c| c.key.contains("good"))
            .count()
    };
    eventually(wait, || async { good() == 10 }).await;
    let n = good();
    running.stop().await;
    n
}

/// Forty copies waiting a minute in delayed naks stay pending on the server; with
/// `max_ack_pending` sized above them the consumer goes on with the rest at once. The same
/// workload with a limit below them stalls: that is what the sizing prevents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_ladder_does_not_stall_a_consumer_sized_for_its_delayed_naks() {
    let sized = good_handled_while_bad_wait(1000, Duration::from_secs(20)).await;
    assert_eq!(
        sized, 10,
        "every good copy handled while forty wait in delayed naks"
    );
    let undersized = good_handled_while_bad_wait(10, Duration::from_secs(4)).await;
    assert_eq!(
        undersized, 0,
        "with max_ack_pending below the delayed naks the consumer stalls"
    );
}
