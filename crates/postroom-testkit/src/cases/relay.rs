//! The relay: a crash between publish and mark republishes the same id; several relays keep
//! per-aggregate order.

use super::*;
use crate::effect::Fault;

/// A relay that dies between the broker's confirm and marking the row (the real relay, at
/// its crash point): the lease expires, another relay republishes with the same id, and the
/// inbox absorbs the copy.
pub async fn relay_crash_between_publish_and_mark(b: &Arc<Backend>) {
    use postroom_core::failpoint::{self, Action};
    let (c, topic, h, run) = consume(b, "relaycrash", Fault::None).await;
    let env = order("rc1", 1);
    b.produce(&env, &topic).await.unwrap();
    let doomed_id = unique("doomed");
    failpoint::arm_for(
        failpoint::RELAY_BEFORE_MARK,
        &doomed_id,
        Action::Panic,
        0,
        Some(1),
    );
    let lease = Duration::from_secs(2);
    let doomed = relay_on(
        b,
        RelayConfig {
            relay_id: doomed_id.clone(),
            lease,
            ..RelayConfig::default()
        },
    );
    let started = Instant::now();
    let died = tokio::spawn(async move { doomed.run_once().await })
        .await
        .expect_err("the doomed relay dies at its crash point");
    assert!(died.is_panic(), "{died}");
    assert_eq!(
        failpoint::hits(failpoint::RELAY_BEFORE_MARK, &doomed_id),
        1,
        "the batch was confirmed before the relay died"
    );
    assert_eq!(
        b.outbox().pending().await.unwrap(),
        1,
        "published, never marked"
    );
    // The survivor can claim the row only once the doomed relay's lease has run out.
    relay_all(b, "survivor").await;
    assert!(
        started.elapsed() >= lease,
        "republished {:?} after the crash, within the doomed relay's lease of {lease:?}",
        started.elapsed()
    );
    until(Duration::from_secs(20), "republished", || async {
        h.calls_for(env.id).len() >= 2
    })
    .await;
    let stats = run.stop().await;
    assert!(
        h.calls_for(env.id).iter().all(|c| c.id == env.id),
        "the copy carries the same id"
    );
    assert_eq!(b.effect_count(&c, "effect:rc1").await.unwrap(), 1);
    assert_eq!(stats.duplicates, 1);
}

/// Two relays on one outbox keep per-aggregate order: version n+1 never goes out before n.
pub async fn relay_keeps_aggregate_order(b: &Arc<Backend>) {
    let (_, topic, h, run) = consume(b, "order", Fault::None).await;
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
    until(
        Duration::from_secs(30),
        "all 30 messages handled",
        || async { h.calls().len() >= 30 },
    )
    .await;
    run.stop().await;
    assert_delivered_in_order(&h, &["x", "y", "z"], 10);
}

/// Two relays running their pipelined loops (publish batch n while marking n-1 and claiming
/// n+1) keep per-aggregate order too, and stop cleanly.
pub async fn relay_loops_keep_aggregate_order(b: &Arc<Backend>) {
    let (_, topic, h, run) = consume(b, "loops", Fault::None).await;
    for v in 1..=10 {
        for agg in ["p", "q", "r"] {
            b.produce(&order(agg, v), &topic).await.unwrap();
        }
    }
    let (stop, rx) = watch::channel(false);
    let relays: Vec<_> = ["la", "lb"]
        .into_iter()
        .map(|id| {
            let config = RelayConfig {
                relay_id: id.into(),
                batch_size: 2,
                idle_wait: Duration::from_millis(20),
                lanes: 2,
                ..RelayConfig::default()
            };
            relay_loop(b, config, rx.clone())
        })
        .collect();
    until(
        Duration::from_secs(30),
        "all published and handled",
        || async { h.calls().len() >= 30 },
    )
    .await;
    stop_once_marked(b, Duration::from_secs(10), "all marked", stop, relays).await;
    run.stop().await;
    assert_delivered_in_order(&h, &["p", "q", "r"], 10);
}

/// `b`'s relay with `config` running its loop in the background until `stop` says stop.
fn relay_loop(
    b: &Backend,
    config: RelayConfig,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let relay = relay_on(b, config);
    tokio::spawn(async move { relay.run(stop).await })
}

/// Wait up to `within` until the relays marked every outbox row (failing the test with `what`
/// otherwise), then stop the relay `loops` through `stop`: each must end within 10 s.
async fn stop_once_marked(
    b: &Arc<Backend>,
    within: Duration,
    what: &str,
    stop: watch::Sender<bool>,
    loops: Vec<tokio::task::JoinHandle<()>>,
) {
    until(within, what, || async {
        b.outbox().pending().await.unwrap() == 0
    })
    .await;
    stop.send(true).unwrap();
    for r in loops {
        tokio::time::timeout(Duration::from_secs(10), r)
            .await
            .expect("relay loop stops")
            .unwrap();
    }
}

/// Each aggregate's versions 1..=`n` reached the handler once each, in order.
fn assert_delivered_in_order(h: &EffectHandler, aggregates: &[&str], n: u64) {
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

async fn relay_small_batches(b: &Arc<Backend>, id: &str) {
    let relay = relay_on(
        b,
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

/// Rows written while the relay waits for a short batch's confirms go out at once, not after
/// confirms they do not depend on: the relay is held at its crash point with a batch sent and
/// its confirms not taken in (a slow broker), and a row written then reaches the consumer
/// before the hold ends. Both rows are marked once the confirms are in, and applied once.
pub async fn relay_sends_new_rows_while_a_batch_awaits_its_confirms(b: &Arc<Backend>) {
    use postroom_core::failpoint::{self, Action};
    let (c, topic, h, run) = consume(b, "early", Fault::None).await;
    let first = order("early-a", 1);
    b.produce(&first, &topic).await.unwrap();
    let relay_id = unique("slow-confirms");
    let (held, is_held) = watch::channel(false);
    let (release, released) = watch::channel(false);
    let hold = Action::Call(Arc::new(move || {
        let (held, mut released) = (held.clone(), released.clone());
        Box::pin(async move {
            let _ = held.send(true);
            let _ = released.wait_for(|r| *r).await;
        })
    }));
    failpoint::arm_for(
        failpoint::RELAY_AWAITING_CONFIRMS,
        &relay_id,
        hold,
        0,
        Some(1),
    );
    let (stop, stopped) = watch::channel(false);
    let config = RelayConfig {
        relay_id: relay_id.clone(),
        idle_wait: Duration::from_millis(20),
        ..RelayConfig::default()
    };
    let loop_task = relay_loop(b, config, stopped);
    until(
        Duration::from_secs(20),
        "the relay sent the first row and was held before taking in its confirms",
        || async { *is_held.borrow() },
    )
    .await;
    let second = order("early-b", 1);
    b.produce(&second, &topic).await.unwrap();
    until(Duration::from_secs(20), "the row written while the first batch's confirms were outstanding went out without waiting for them", || async { !h.calls_for(second.id).is_empty() }).await;
    assert_eq!(
        b.outbox().pending().await.unwrap(),
        2,
        "neither row is marked while the first batch's confirms are held"
    );
    release.send(true).unwrap();
    stop_once_marked(
        b,
        Duration::from_secs(20),
        "both rows marked once the confirms are taken in",
        stop,
        vec![loop_task],
    )
    .await;
    until(
        Duration::from_secs(20),
        "the first row was applied too",
        || async { !h.calls_for(first.id).is_empty() },
    )
    .await;
    run.stop().await;
    assert_eq!(effect_of(b, &c, &first).await, 1);
    assert_eq!(effect_of(b, &c, &second).await, 1);
}
