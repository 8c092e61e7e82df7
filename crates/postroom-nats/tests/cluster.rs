//! A three-node JetStream cluster of the test's own, the work stream and its durables with
//! three replicas: the stream leader is SIGKILLed while a relay publishes from the outbox and
//! a consumer applies effects through its inbox, and started again later. The client is given
//! every node's URL and fails over by itself; the relay and the consumer are never restarted.
//! Every row the relay got a PubAck for is applied exactly once; redeliveries the inbox
//! absorbed are counted and reported.

mod common;

use common::TestNats;
use postroom_core::Envelope;
use postroom_testkit::Backend;
use postroom_testkit::cases::{effect_of, order, policy, start_consumer, wait_for};
use postroom_testkit::effect::{EffectHandler, Fault};
use postroom_testkit::running::spawn_relay;
use postroom_testkit::servers::NatsCluster;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Messages produced; the leader is killed after a third of them.
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

/// The `server_name` of the stream's leader, once it has one (within 20 s).
async fn stream_leader(nats: &TestNats, stream: &str) -> String {
    let end = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let info: Result<serde_json::Value, _> = postroom_nats::error::api_empty(
            nats.conn.client(),
            "stream info",
            format!("STREAM.INFO.{stream}"),
        )
        .await;
        if let Some(name) = info
            .ok()
            .as_ref()
            .and_then(|i| i["cluster"]["leader"].as_str())
            .filter(|n| !n.is_empty())
        {
            return name.to_string();
        }
        assert!(
            std::time::Instant::now() < end,
            "the stream {stream} elected no leader within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
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

    let mut envs = Vec::new();
    let mut killed = None;
    for i in 0..MESSAGES {
        let e = order(&format!("c{i}"), 1);
        backend.produce(&e, "order.created").await.unwrap();
        envs.push(e);
        if i + 1 == KILL_AFTER {
            // Mid-run: wait until the relay confirmed what was produced so far, so that the
            // kill lands on a stream with copies in it, then SIGKILL its leader.
            assert!(
                wait_for(Duration::from_secs(20), || async {
                    backend.outbox().pending().await.unwrap() == 0
                })
                .await,
                "the relay published the first rows before the kill"
            );
            let leader = stream_leader(&nats, &nats.prefix).await;
            let node = cluster
                .node_named(&leader)
                .unwrap_or_else(|| panic!("the stream leader {leader:?} is not a node of ours"));
            cluster.kill(node);
            killed = Some((node, leader));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (node, old_leader) = killed.expect("the leader was killed");
    let new_leader = stream_leader(&nats, &nats.prefix).await;
    assert_ne!(
        new_leader, old_leader,
        "another node leads the stream after the kill"
    );

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

    // The killed node comes back and catches up; consumption goes on through it.
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.restart(node);
        cluster
    })
    .await
    .unwrap();
    let after = order("after-restart", 1);
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

    let _ = stop_relay.send(true);
    tokio::time::timeout(Duration::from_secs(30), relay)
        .await
        .expect("the relay stops within 30 s")
        .expect("the relay ended without a panic");
    let stats = running.stop().await;
    let calls = handler.calls().len();
    eprintln!(
        "cluster run: {} messages, {calls} handler calls, {} applied, {} duplicates absorbed by the inbox, {} reconnects, leader {old_leader} killed, {new_leader} took over",
        envs.len(),
        stats.applied,
        stats.duplicates,
        nats.conn.reconnects(),
    );
    exactly_once_violations(&effects(&backend, consumer, &envs).await).unwrap();
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
