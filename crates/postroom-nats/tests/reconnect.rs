//! Recovery: a durable deleted under a running consumer is recreated from the topology, and a
//! server restarted mid-run (on a server of this test's own) loses nothing: the client
//! reconnects with a bounded backoff, the missed heartbeats make the pull loops ask again.

mod common;

use common::probe::{Mode, Probe, policy, run_on_orders};
use common::server::OwnServer;
use common::{TestNats, eventually, order};
use postroom_core::{MessageId, OutgoingMessage, Publisher, Transport};
use postroom_nats::naming;
use std::collections::HashSet;
use std::time::Duration;

async fn publish_until_confirmed(p: &dyn Publisher, m: &OutgoingMessage) {
    for _ in 0..200 {
        if p.publish(m).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never confirmed", m.id);
}

/// A deleted durable is recreated from the topology. It starts again from the stream's first
/// message: copies already handled come again and the inbox absorbs them (the replay window
/// is the work stream's `max_age`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_durable_is_recreated_and_consumption_goes_on() {
    let nats = TestNats::new().await;
    let cfg = nats.config();
    let transport = nats.transport(cfg.clone());
    let probe = Probe::new(Mode::Ok);
    let running = run_on_orders(&transport, "del", probe.clone(), policy("1s", 2), 2).await;
    let before = order("before", 1);
    let publisher = transport.publisher();
    publisher
        .publish(&OutgoingMessage::from_envelope(&before, "order.created"))
        .await
        .unwrap();
    assert!(
        probe
            .handled_within(before.id, Duration::from_secs(10))
            .await
    );
    let lanes = naming::lanes(
        &transport.config(),
        transport.config().consumer("del").unwrap(),
    );
    let durable = &lanes[0].durable;
    let _: serde_json::Value = postroom_nats::error::api_empty(
        nats.conn.client(),
        "deleting the durable",
        format!("CONSUMER.DELETE.{}.{durable}", nats.prefix),
    )
    .await
    .unwrap();
    let after = order("after", 1);
    publish_until_confirmed(
        publisher.as_ref(),
        &OutgoingMessage::from_envelope(&after, "order.created"),
    )
    .await;
    assert!(
        probe
            .handled_within(after.id, Duration::from_secs(20))
            .await,
        "consumed after the durable was recreated"
    );
    assert!(
        transport
            .topology()
            .unwrap()
            .plan()
            .await
            .unwrap()
            .is_empty(),
        "the topology is whole again"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_mid_run_loses_nothing() {
    let mut server = OwnServer::start();
    let nats = TestNats::at(&server.url()).await;
    let transport = nats.transport(nats.config());
    let probe = Probe::new(Mode::Ok);
    let running = run_on_orders(&transport, "rs", probe.clone(), policy("1s", 2), 4).await;
    let publisher = transport.publisher();
    let mut ids: Vec<MessageId> = Vec::new();
    for i in 0..40 {
        let e = order(&format!("r{i}"), 1);
        ids.push(e.id);
        publish_until_confirmed(
            publisher.as_ref(),
            &OutgoingMessage::from_envelope(&e, "order.created"),
        )
        .await;
        if i == 19 {
            // Mid-run: SIGKILL and start again on the same port and store.
            server.restart();
        }
    }
    let handled = || probe.calls().iter().map(|c| c.id).collect::<HashSet<_>>();
    assert!(
        eventually(Duration::from_secs(60), || async {
            ids.iter().all(|i| handled().contains(i))
        })
        .await,
        "every confirmed message handled after the restart: missing {:?}",
        ids.iter().filter(|i| !handled().contains(i)).count()
    );
    assert!(nats.conn.reconnects() >= 1, "the reconnect was counted");
    running.stop().await;
    drop(nats);
    server.kill();
}
