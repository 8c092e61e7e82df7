//! A three-node JetStream cluster of the test's own, the work stream and its durables with
//! three replicas: the node leading the stream, the durables and the client's connection is
//! SIGKILLed while a relay publishes from the outbox and a consumer applies effects through
//! its inbox, and started again later. The client is given
//! every node's URL and fails over by itself; the relay and the consumer are never restarted.
//! Every row the relay got a PubAck for is applied exactly once; redeliveries the inbox
//! absorbed are counted and reported.
//!
//! `POSTROOM_HARD_CRASH_CYCLES` (1 when unset) repeats the kill: each cycle kills the node
//! that leads the stream then (the one elected after the previous kill, when it is the
//! client's), after the previously killed node came back and caught up.

mod common;

use common::{TestNats, parked, stream_messages, subscribe_to_orders};
use postroom_core::{
    BoxSubscriber, Delivery, Envelope, OutgoingMessage, ParkingFilter, ParkingStore, Subscriber,
    Transport,
};
use postroom_nats::{NatsTransport, naming};
use postroom_testkit::Backend;
use postroom_testkit::StoreFixture;
use postroom_testkit::cases::{effect_of, order, policy, start_consumer, wait_for};
use postroom_testkit::effect::{EffectHandler, Fault};
use postroom_testkit::running::spawn_relay;
use postroom_testkit::servers::NatsCluster;
use postroom_testkit::stores::sqlite::SqliteFixture;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Messages produced in each cycle; the leader is killed after a third of them.
const MESSAGES: usize = 60;
const KILL_AFTER: usize = 20;

/// What is wrong with a run whose messages got `effects` (how many times each message's
/// effect was applied): the ones never applied, and the ones applied more than once.
fn exactly_once_violations(effects: &BTreeMap<String, u64>) -> Result<(), String> {
    let lost: Vec<_> = effects.iter().filter(|(_, n)| **n == 0).collect();
    let twice: Vec<_> = effects.iter().filter(|(_, n)| **n > 1).collect();
    if lost.is_empty() && twice.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "confirmed but never applied: {lost:?}; applied more than once: {twice:?}"
        ))
    }
}

/// The leader's `server_name` and the count of the other peers of a stream or durable
/// (`info` is `STREAM.INFO.<stream>` or `CONSUMER.INFO.<stream>.<durable>`), once it has a
/// leader (within 20 s).
async fn raft_group(nats: &TestNats, info: &str) -> (String, usize) {
    let end = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answer: Result<serde_json::Value, _> =
            postroom_nats::error::api_empty(nats.conn.client(), "info", info.to_string()).await;
        if let Some(group) = answer.ok().map(|a| a["cluster"].clone())
            && let Some(leader) = group["leader"].as_str().filter(|n| !n.is_empty())
        {
            let peers = group["replicas"].as_array().map_or(0, Vec::len);
            return (leader.to_string(), peers);
        }
        assert!(
            std::time::Instant::now() < end,
            "{info} names no leader within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `server_name` of the leader of the stream `stream`.
async fn stream_leader(nats: &TestNats, stream: &str) -> String {
    raft_group(nats, &format!("STREAM.INFO.{stream}")).await.0
}

/// Move the leadership of a stream or durable (`group` is `STREAM.<stream>` or
/// `CONSUMER.<stream>.<durable>`) to the node named `wanted` by asking its leader to step
/// down until the election lands there.
async fn lead_from(nats: &TestNats, group: &str, wanted: &str) {
    let info = group.replacen('.', ".INFO.", 1);
    let stepdown = group.replacen('.', ".LEADER.STEPDOWN.", 1);
    for _ in 0..20 {
        let (now, _) = raft_group(nats, &info).await;
        if now == wanted {
            return;
        }
        let _: Result<serde_json::Value, _> = postroom_nats::error::api_empty(
            nats.conn.client(),
            "leader step-down",
            stepdown.clone(),
        )
        .await;
        for _ in 0..50 {
            if raft_group(nats, &info).await.0 != now {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    panic!("{group} never elected {wanted}");
}

/// SIGKILL the leader of the stream `stream`; returns the node and its `server_name`.
async fn kill_stream_leader(
    cluster: &mut NatsCluster,
    nats: &TestNats,
    stream: &str,
) -> (usize, String) {
    let leader = stream_leader(nats, stream).await;
    let node = cluster
        .node_named(&leader)
        .unwrap_or_else(|| panic!("the stream leader {leader:?} is not a node of ours"));
    cluster.kill(node);
    (node, leader)
}

/// Wait until every peer of the stream `stream` is online and caught up with its leader.
async fn wait_all_current(nats: &TestNats, stream: &str) {
    for _ in 0..150 {
        let info: Result<serde_json::Value, _> = postroom_nats::error::api_empty(
            nats.conn.client(),
            "stream info",
            format!("STREAM.INFO.{stream}"),
        )
        .await;
        if let Some(peers) = info
            .ok()
            .and_then(|i| i["cluster"]["replicas"].as_array().cloned())
            && peers.len() == 2
            && peers.iter().all(|p| {
                p["current"].as_bool() == Some(true) && p["offline"].as_bool() != Some(true)
            })
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the peers of {stream} did not catch up within 30 s");
}

/// Fail the test unless the work stream and every durable of `consumer` have three
/// replicas.
async fn assert_three_replicas(nats: &TestNats, transport: &NatsTransport, consumer: &str) {
    let (_, peers) = raft_group(nats, &format!("STREAM.INFO.{}", nats.prefix)).await;
    assert_eq!(peers, 2, "the work stream has a leader and two more peers");
    let config = transport.config();
    for lane in naming::lanes(&config, config.consumer(consumer).unwrap()) {
        let info = format!("CONSUMER.INFO.{}.{}", nats.prefix, lane.durable);
        let (_, peers) = raft_group(nats, &info).await;
        assert_eq!(peers, 2, "the durable {} has three replicas", lane.durable);
    }
}

async fn effects(backend: &Backend, consumer: &str, envs: &[Envelope]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for e in envs {
        m.insert(e.id.to_string(), effect_of(backend, consumer, e).await);
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_stream_leader_loses_no_confirmed_message_and_applies_each_once() {
    let mut cluster = tokio::task::spawn_blocking(|| NatsCluster::start("prn"))
        .await
        .unwrap();
    let nats = TestNats::at(&cluster.urls()).await;
    let mut cfg = nats.config();
    cfg.replicas = 3;
    let transport = nats.transport(cfg);
    let backend =
        Arc::new(Backend::on_sqlite(transport.clone(), "1s", Duration::from_secs(2)).await);
    let consumer = "cluster";
    let handler = EffectHandler::new(backend.clone(), consumer, Fault::None);
    let running = start_consumer(
        &backend,
        consumer,
        &["order.created"],
        handler.clone(),
        policy(&backend),
    )
    .await;
    let (stop_relay, relay_stop) = watch::channel(false);
    let relay = spawn_relay(
        backend.outbox(),
        backend.publisher(),
        "cluster-relay",
        5,
        Duration::from_secs(10),
        relay_stop,
    );

    assert_three_replicas(&nats, &transport, consumer).await;

    let mut envs = Vec::new();
    let mut leaders = Vec::new();
    let cycles = postroom_testkit::servers::hard_crash_cycles();
    for cycle in 0..cycles {
        // The client's own server leads the stream and the durables: the kill takes the
        // consumer's pull requests and cuts the client off too, and it must fail over to
        // another server of its list.
        let own_server = nats.conn.client().server_info().server_name;
        lead_from(&nats, &format!("STREAM.{}", nats.prefix), &own_server).await;
        let config = transport.config();
        for lane in naming::lanes(&config, config.consumer(consumer).unwrap()) {
            let durable = format!("CONSUMER.{}.{}", nats.prefix, lane.durable);
            lead_from(&nats, &durable, &own_server).await;
        }
        let mut killed = None;
        for i in 0..MESSAGES {
            let e = order(&format!("c{cycle}-{i}"), 1);
            backend.produce(&e, "order.created").await.unwrap();
            envs.push(e);
            if i + 1 == KILL_AFTER {
                // Mid-run, with copies of this cycle in the stream and the relay still
                // publishing: SIGKILL the stream's leader.
                let before = MESSAGES as u64 * u64::from(cycle) + 10;
                assert!(
                    wait_for(Duration::from_secs(20), || async {
                        stream_messages(&nats.conn, &nats.prefix).await >= before
                    })
                    .await,
                    "the relay published the first rows of the cycle before the kill"
                );
                killed = Some(kill_stream_leader(&mut cluster, &nats, &nats.prefix).await);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (node, old_leader) = killed.expect("the leader was killed");
        let new_leader = stream_leader(&nats, &nats.prefix).await;
        assert_ne!(
            new_leader, old_leader,
            "another node leads the stream after the kill"
        );
        leaders.push(format!("{old_leader} -> {new_leader}"));
        assert!(
            wait_for(Duration::from_secs(30), || async {
                backend.outbox().pending().await.unwrap() == 0
            })
            .await,
            "the same relay, never restarted, confirmed every row after the kill"
        );
        assert!(
            wait_for(Duration::from_secs(30), || async {
                effects(&backend, consumer, &envs)
                    .await
                    .values()
                    .all(|n| *n >= 1)
            })
            .await,
            "the same consumer, never restarted, applied every confirmed message: {:?}",
            exactly_once_violations(&effects(&backend, consumer, &envs).await)
        );

        // The killed node comes back and catches up; consumption goes on.
        cluster = tokio::task::spawn_blocking(move || {
            cluster.restart(node);
            cluster
        })
        .await
        .unwrap();
        wait_all_current(&nats, &nats.prefix).await;
        let after = order(&format!("after-restart-{cycle}"), 1);
        backend.produce(&after, "order.created").await.unwrap();
        envs.push(after);
        assert!(
            wait_for(Duration::from_secs(30), || async {
                effects(&backend, consumer, &envs)
                    .await
                    .values()
                    .all(|n| *n >= 1)
            })
            .await,
            "a message produced after the restart was applied"
        );
    }

    let _ = stop_relay.send(true);
    tokio::time::timeout(Duration::from_secs(30), relay)
        .await
        .expect("the relay stops within 30 s")
        .expect("the relay ended without a panic");
    let stats = running.stop().await;
    let calls = handler.calls().len();
    eprintln!(
        "cluster run: {cycles} kills, {} messages, {calls} handler calls, {} applied, {} duplicates absorbed by the inbox, {} reconnects, stream leaders killed -> elected: {leaders:?}",
        envs.len(),
        stats.applied,
        stats.duplicates,
        nats.conn.reconnects(),
    );
    exactly_once_violations(&effects(&backend, consumer, &envs).await).unwrap();
    assert!(
        nats.conn.reconnects() >= u64::from(cycles),
        "the client was cut off with its server and reconnected to another"
    );
    assert_eq!(
        stats.applied,
        envs.len() as u64,
        "one applied effect per message"
    );
    assert_eq!(
        calls as u64,
        stats.applied + stats.duplicates,
        "every handler call beyond the first of a message was absorbed by the inbox"
    );
    drop(backend);
    drop(transport);
    drop(nats);
    drop(cluster);
}

/// Take `n` deliveries of the subscriber's next copy and drop each unsettled, as a consumer
/// that dies while handling it would.
async fn crash_on(sub: &mut BoxSubscriber, n: u32) {
    for k in 1..=n {
        let d = loop {
            if let Some(d) = sub.next(Duration::from_secs(1)).await.unwrap() {
                break d;
            }
        };
        assert_eq!(d.message().deliveries, Some(k));
        drop(d);
    }
}

/// After the work stream's leader is killed, a copy that crash-loops to `max_deliver` still
/// reaches the parking stream (three replicas too) by its MAX_DELIVERIES advisory, and is
/// parked from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_after_the_leader_is_killed_still_reaches_the_parking_stream() {
    let mut cluster = tokio::task::spawn_blocking(|| NatsCluster::start("prp"))
        .await
        .unwrap();
    let nats = TestNats::at(&cluster.urls()).await;
    let mut cfg = nats.config();
    cfg.replicas = 3;
    cfg.ack_wait = Duration::from_secs(1);
    cfg.max_deliver = 2;
    let transport = nats.transport(cfg);
    let mut sub = subscribe_to_orders(&transport, "poison", 1).await;
    assert_three_replicas(&nats, &transport, "poison").await;
    let parking_stream = naming::parking_stream(&nats.prefix, "poison");
    let (_, peers) = raft_group(&nats, &format!("STREAM.INFO.{parking_stream}")).await;
    assert_eq!(peers, 2, "the parking stream has three replicas");

    let (_, old_leader) = kill_stream_leader(&mut cluster, &nats, &nats.prefix).await;
    let env = order("poison", 1);
    let message = OutgoingMessage::from_envelope(&env, "order.created");
    assert!(
        wait_for(Duration::from_secs(20), || async {
            transport.publisher().publish(&message).await.is_ok()
        })
        .await,
        "the poison message was confirmed by the cluster without its old leader"
    );
    assert_ne!(stream_leader(&nats, &nats.prefix).await, old_leader);
    // Both deliveries die unsettled; the subscriber keeps a pull request outstanding, so
    // the server advertises the limit.
    crash_on(&mut sub, 2).await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            stream_messages(&nats.conn, &parking_stream).await == 1
        })
        .await,
        "the MAX_DELIVERIES advisory was captured in the parking stream"
    );
    sub.close().await;
    let fixture = SqliteFixture::fresh().await;
    let store: Arc<dyn ParkingStore> = fixture.parking();
    assert_eq!(parked(transport.as_ref(), "poison", &store).await, 1);
    let p = &store.search(&ParkingFilter::default(), 10).await.unwrap()[0];
    assert_eq!(
        (p.message_id, p.error_code.as_str()),
        (env.id, "max_deliveries")
    );
    drop(transport);
    drop(nats);
    drop(cluster);
}

/// The check above fails on a lost message and on an effect applied twice.
#[test]
fn the_exactly_once_check_catches_a_lost_and_a_doubled_effect() {
    let good: BTreeMap<String, u64> = [("a".into(), 1), ("b".into(), 1)].into();
    exactly_once_violations(&good).unwrap();
    let lost: BTreeMap<String, u64> = [("a".into(), 1), ("b".into(), 0)].into();
    let e = exactly_once_violations(&lost).unwrap_err();
    assert!(e.contains("\"b\""), "{e}");
    let doubled: BTreeMap<String, u64> = [("a".into(), 2), ("b".into(), 1)].into();
    let e = exactly_once_violations(&doubled).unwrap_err();
    assert!(e.contains("\"a\""), "{e}");
}
