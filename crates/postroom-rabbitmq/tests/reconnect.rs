//! Reconnects: the broker closes the connection under a running consumer and publisher; the link
//! reconnects with a bounded backoff, re-declares the topology, rebuilds its channels, and
//! consumption resumes.

mod common;

use common::probe::{Mode, Probe, Running, policy, run_probe};
use common::{TestRabbit, eventually, order, publish_order};
use postroom_core::{OutgoingMessage, Publisher};
use postroom_rabbitmq::{ConfirmingPublisher, Topology};
use std::sync::Arc;
use std::time::Duration;

/// A `1s` workload whose `consumer` takes `order.created`, with its topology, and an
/// always-succeeding probe running as `consumer` (prefetch 2, `concurrency` at once) whose
/// retries go through the returned publisher.
async fn probed_workload(
    consumer: &str,
    concurrency: usize,
) -> (
    TestRabbit,
    Topology,
    Arc<ConfirmingPublisher>,
    Arc<Probe>,
    Running,
) {
    let t = TestRabbit::new("1s").await;
    let topo = t.add_consumer(consumer, &["order.created"]).await;
    let publisher = t.publisher();
    let probe = Probe::new(Mode::Ok);
    let running = run_probe(
        &t,
        consumer,
        2,
        &publisher,
        &probe,
        policy("1s", 3),
        concurrency,
    );
    (t, topo, publisher, probe, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_closed_by_the_broker_is_rebuilt_and_consumption_resumes() {
    let (t, topo, publisher, probe, running) = probed_workload("rc", 2).await;
    let first = publish_order(publisher.as_ref(), "rc1").await;
    assert!(
        probe
            .handled_within(first.id, Duration::from_secs(10))
            .await
    );

    // Someone deletes the work queue's binding, then the broker (or an operator) closes the
    // connection: the reconnect re-declares the topology and so restores the binding.
    t.unbind(&t.cfg().exchange, "order.created").await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            t.api.close_connections_named(&t.prefix).await.unwrap() >= 1
        })
        .await
    );

    let second = order("rc2", 1);
    let published = eventually(Duration::from_secs(30), || async {
        publisher
            .publish(&OutgoingMessage::from_envelope(&second, "order.created"))
            .await
            .is_ok()
    })
    .await;
    assert!(published, "the publisher reconnects");
    assert!(
        probe
            .handled_within(second.id, Duration::from_secs(30))
            .await,
        "consumption resumes"
    );
    running.stop().await;
    let stats = t.broker.stats();
    assert!(stats.reconnects() >= 1, "reconnected");
    assert!(
        stats.reconnects() <= 3,
        "one reconnect per outage, not a storm: {}",
        stats.reconnects()
    );
    assert!(
        topo.plan().await.unwrap().is_empty(),
        "the reconnect re-declared the topology"
    );
    t.broker.close().await;
}

/// The broker cancels the consumer when its queue is deleted: the cancellation is counted,
/// the subscriber reopens once the topology is back, and consumption resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_cancelled_by_the_broker_is_counted_and_resumes() {
    let (t, topo, publisher, probe, running) = probed_workload("cc", 1).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            t.consumers(&topo.names("cc").work_queue).await == 1
        })
        .await,
        "the consumer attached"
    );
    t.api
        .delete_queue(&topo.names("cc").work_queue)
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            t.broker.stats().cancellations() >= 1
        })
        .await,
        "cancellation counted"
    );
    topo.apply().await.unwrap();
    let env = publish_order(publisher.as_ref(), "cc1").await;
    assert!(
        probe.handled_within(env.id, Duration::from_secs(30)).await,
        "consumption resumes"
    );
    running.stop().await;
}

#[tokio::test]
async fn prefetch_zero_is_refused_and_a_closed_link_says_so() {
    let t = TestRabbit::new("1s").await;
    let opts = postroom_rabbitmq::SubscriberOptions::new(0);
    let err = postroom_rabbitmq::RabbitSubscriber::new(
        t.broker.clone(),
        t.publisher(),
        &t.cfg(),
        "x",
        opts,
    )
    .unwrap_err();
    assert_eq!(err.kind(), postroom_core::ErrorKind::Config);
    assert!(err.to_string().contains("prefetch"), "{err}");
    t.broker.close().await;
    let err = t.broker.channel().await.unwrap_err();
    assert_eq!(err.kind(), postroom_core::ErrorKind::Closed, "{err}");
}

/// A re-declare the broker keeps refusing after a reconnect (a queue of the topology exists
/// with other arguments: PRECONDITION_FAILED) must not turn into a reconnect storm: every
/// caller in between gets an error at once, and connections are opened no faster than the
/// backoff allows, even though each of them succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declare_that_keeps_failing_is_retried_no_faster_than_the_backoff() {
    use postroom_rabbitmq::topology::desired::{DesiredTopology, QueueSpec};
    let t = TestRabbit::new("1s").await;
    let queue = format!("{}.conflict", t.prefix);
    // The queue exists as a classic queue; the topology wants it as a quorum queue.
    t.api
        .declare_queue(&queue, serde_json::Map::new())
        .await
        .expect("declare the conflicting classic queue");
    let mut args = serde_json::Map::new();
    args.insert("x-queue-type".into(), "quorum".into());
    t.broker.redeclare_on_reconnect(DesiredTopology {
        queues: vec![QueueSpec {
            name: queue.clone(),
            arguments: args,
        }],
        ..DesiredTopology::default()
    });
    t.broker.sever().await;

    // Callers keep asking for channels, as a publisher and several subscribers would.
    let window = Duration::from_secs(3);
    let started = std::time::Instant::now();
    let (mut refused, mut waited) = (0, 0);
    while started.elapsed() < window {
        match t.broker.channel().await {
            Ok(_) => panic!("the declare cannot succeed"),
            Err(e) if e.kind() == postroom_core::ErrorKind::Config => {
                if refused == 0 {
                    eprintln!("refused: {e}");
                }
                refused += 1
            }
            Err(e) => {
                assert_eq!(e.kind(), postroom_core::ErrorKind::Connection, "{e}");
                waited += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let attempts = t.broker.stats().reconnects();
    eprintln!(
        "{attempts} connections opened, {refused} declares refused, {waited} callers told to wait in {window:?}"
    );
    assert!(refused >= 1, "the conflicting declare was attempted");
    assert_eq!(attempts, refused, "one connection per attempt");
    // The first reconnect delay is 0.5 s with jitter down to half of it, and it grows: at
    // most one attempt per 250 ms, whatever the machine's speed.
    let bound = 1 + (window.as_millis() / 250) as u64;
    assert!(
        attempts <= bound,
        "{attempts} connections in {window:?}: a reconnect storm (at most {bound} allowed)"
    );
    assert!(waited > attempts, "callers in between were told to wait");
    t.broker.close().await;
}

/// A host that takes the TCP connection and never speaks AMQP (a hung broker, a proxy with
/// nothing behind it): connecting fails after the setup timeout with a clear error instead of
/// waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_never_answers_the_handshake_is_a_timeout_not_a_hang() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let started = std::time::Instant::now();
    let e = postroom_rabbitmq::Broker::connect_with(
        &format!("amqp://guest:secret@127.0.0.1:{port}/%2f"),
        postroom_rabbitmq::BrokerOptions {
            setup_timeout: Duration::from_secs(1),
            ..Default::default()
        },
    )
    .await
    .expect_err("a broker that never answers is not connected to");
    let took = started.elapsed();
    assert_eq!(e.kind(), postroom_core::ErrorKind::Connection, "{e}");
    let text = e.to_string();
    assert!(text.contains("no answer from the broker"), "{text}");
    assert!(
        !text.contains("secret"),
        "the password is not printed: {text}"
    );
    assert!(
        took < Duration::from_secs(10),
        "given up after the setup timeout, not hung: {took:?}"
    );
    held.abort();
}
