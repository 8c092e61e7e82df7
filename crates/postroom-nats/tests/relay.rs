//! The relay on JetStream: a relay that died between the PubAck and marking its rows
//! publishes the same ids again; `Nats-Msg-Id` makes the stream keep one copy, the PubAck of
//! the republish is flagged duplicate and counts as confirmed, and the consumer sees one
//! delivery. A batch keeps its publishes in flight and gets one result per message.

mod common;

use common::probe::{Mode, Probe, policy, run_on_orders};
use common::{TestNats, bind_to_orders, eventually, order, stream_messages};
use postroom_core::{OutboxRelay, RelayConfig, Transport};
use postroom_testkit::Backend;
use postroom_testkit::cases::publish_all;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_after_publish_before_mark_leaves_one_copy_in_the_stream() {
    let nats = TestNats::new().await;
    let transport = nats.transport(nats.config());
    let probe = Probe::new(Mode::Ok);
    let running = run_on_orders(&transport, "inv", probe.clone(), policy("1s", 2), 2).await;
    let backend = Backend::on_sqlite(transport.clone(), "1s", Duration::from_secs(2)).await;
    let envs: Vec<_> = (0..5).map(|i| order(&format!("o{i}"), 1)).collect();
    for e in &envs {
        backend.produce(e, "order.created").await.unwrap();
    }
    // The doomed relay: claims, publishes (every PubAck received), dies before marking.
    let claimed = backend
        .outbox()
        .claim("doomed", 10, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 5);
    let msgs: Vec<_> = claimed.iter().map(|r| r.to_message()).collect();
    publish_all(transport.publisher().as_ref(), &msgs).await;
    // Its lease runs out; another relay publishes the same ids again and marks them.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let survivor = OutboxRelay::new(
        backend.outbox(),
        transport.publisher(),
        RelayConfig {
            relay_id: "survivor".into(),
            ..RelayConfig::default()
        },
    );
    let pass = survivor.run_once().await.unwrap();
    assert_eq!(pass.claimed, 5, "the survivor republished every row");
    assert_eq!(backend.outbox().pending().await.unwrap(), 0, "all marked");
    assert_eq!(
        stream_messages(&nats.conn, &nats.prefix).await,
        5,
        "Nats-Msg-Id kept one copy of each id"
    );
    assert!(
        eventually(Duration::from_secs(20), || async {
            probe.calls().len() >= 5
        })
        .await
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.stop().await;
    for e in &envs {
        assert_eq!(probe.calls_for(e.id).len(), 1, "one delivery of {}", e.id);
    }
}

/// A message over the server's `max_payload` fails alone, as invalid data, and its batch
/// mates are confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_servers_max_payload_fails_alone() {
    let nats = TestNats::new().await;
    let transport = nats.transport(nats.config());
    bind_to_orders(&transport, "big").await;
    postroom_testkit::cases::a_message_over_the_transports_limit_fails_alone(
        transport.as_ref(),
        "order.created",
    )
    .await;
    assert_eq!(stream_messages(&nats.conn, &nats.prefix).await, 2);
}
