//! A broker that blocks publishers under a memory alarm (on a node of the test's own, so the
//! shared broker is never blocked): the consumers' acks still flow, because they do not share
//! the blocked publishing connection, and a retry publish that gets no confirm comes back with
//! an error within the confirm timeout; its delivery is handed back and delivered again. Once
//! the alarm clears, the message walks on.

mod common;

use common::node::OwnRabbit;
use common::{TestRabbit, eventually, order, publish_each, publish_order, spawn_on_transport};
use postroom_core::{
    Consumer, ConsumerConfig, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming,
    RetryPolicy, Subscription, Transport, async_trait,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Sets the node's memory high watermark so low that it raises a memory alarm; restores it on
/// drop, also when the test panics.
struct MemoryAlarm<'a>(&'a OwnRabbit);

impl<'a> MemoryAlarm<'a> {
    fn raise(node: &'a OwnRabbit) -> Self {
        node.ctl_text(&["set_vm_memory_high_watermark", "0.0000001"]);
        Self(node)
    }
}

impl Drop for MemoryAlarm<'_> {
    fn drop(&mut self) {
        let _ = self.0.ctl(&["set_vm_memory_high_watermark", "0.4"]);
    }
}

/// Fails the message of aggregate `fail` on its first attempt; handles the others slowly
/// enough that the failed one's retry publish is sent first.
struct Handler1 {
    calls: Mutex<Vec<(String, u32)>>,
}

#[async_trait]
impl Handler for Handler1 {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let agg = m.envelope.aggregate.id.clone();
        self.calls.lock().unwrap().push((agg.clone(), m.attempt));
        if agg == "fail" && m.attempt == 0 {
            return Err(HandlerError::transient("dependency_down", "fails once"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(Handled::Applied)
    }
}

impl Handler1 {
    fn calls_of(&self, agg: &str) -> Vec<u32> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.0 == agg)
            .map(|c| c.1)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_memory_alarm_acks_flow_and_a_blocked_retry_publish_hands_its_delivery_back() {
    let node = tokio::task::spawn_blocking(OwnRabbit::start).await.unwrap();
    let t = TestRabbit::on(&node.amqp_url(), &node.api_url(), "1s", |o| {
        o.confirm_timeout = Duration::from_secs(2);
    })
    .await;
    t.add_consumer("al", &["order.created"]).await;
    let transport = Arc::new(t.transport());
    let work_queue = t.cfg().names("al").work_queue;

    // The failing message first, then the others, all before the alarm.
    let good: Vec<_> = (0..6).map(|i| order(&format!("g{i}"), 1)).collect();
    let publisher = transport.publisher();
    publish_order(publisher.as_ref(), "fail").await;
    publish_each(publisher.as_ref(), &good).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            node.queue_messages(&work_queue) == Some(7)
        })
        .await,
        "the 7 messages are in the work queue"
    );

    let alarm = MemoryAlarm::raise(&node);
    let handler = Arc::new(Handler1 {
        calls: Mutex::new(Vec::new()),
    });
    let mut cfg = ConsumerConfig::new("al", EnvelopeDecoder::new().accept("order.created", 1..=1));
    cfg.retry = RetryPolicy::with_ladder("1s".parse().unwrap());
    cfg.concurrency = 8;
    cfg.breaker.failure_threshold = 0;
    let consumer =
        Consumer::for_transport(cfg, handler.clone(), &transport.capabilities()).unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = spawn_on_transport(
        consumer,
        &transport,
        Subscription::new("al", &["order.created"]).prefetch(16),
        rx,
    );

    // Acks flow on the consumers' connection: only the failing message stays in the queue.
    let acked = eventually(Duration::from_secs(30), || async {
        node.queue_messages(&work_queue) == Some(1)
    })
    .await;
    assert!(
        acked,
        "acks did not reach the broker under the alarm: {:?} messages left, handled {:?}",
        node.queue_messages(&work_queue),
        handler.calls.lock().unwrap()
    );
    // The blocked retry publish came back within its timeout; the delivery was handed back
    // and delivered again, still on its first attempt.
    assert!(
        eventually(Duration::from_secs(30), || async {
            handler.calls_of("fail").iter().filter(|a| **a == 0).count() >= 2
        })
        .await,
        "the failing message was not delivered again: {:?}",
        handler.calls_of("fail")
    );
    assert!(
        handler.calls_of("fail").iter().all(|a| *a == 0),
        "no retry got through the alarm"
    );

    // The alarm clears: the retry is published, waits its stage, and is handled.
    drop(alarm);
    assert!(
        eventually(Duration::from_secs(60), || async {
            handler.calls_of("fail").contains(&1)
        })
        .await,
        "the retry was not handled after the alarm cleared: {:?}",
        handler.calls_of("fail")
    );
    for env in &good {
        assert_eq!(
            handler.calls_of(&env.aggregate.id),
            vec![0],
            "{} handled once",
            env.aggregate.id
        );
    }
    stop.send(true).unwrap();
    run.await.unwrap().unwrap();
    transport.close().await;
}
