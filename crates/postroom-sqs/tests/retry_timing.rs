//! No retry is early: every receive of a retried message is measured against the moment its
//! retry was due (when the retry was scheduled plus the plan's delay, jitter included, less
//! the broker clock's allowance). The subscriber is wrapped to see each retry and each
//! receive; the deliveries settle through the real SQS acts underneath.

mod common;

use common::probe::{Mode, Probe, config, store_at};
use common::{TestSqs, eventually, order, subscriber_of};
use postroom_core::consumer::{Consumer, Ordering};
use postroom_core::transport::Handback;
use postroom_core::{
    Delivery, MessageId, OutgoingMessage, ParkedMessage, ReceivedMessage, Result, RetryPlan,
    RetryPolicy, Subscriber, Transport,
};
use postroom_sqs::{SqsDelivery, SqsSubscriber};
use postroom_testkit::cases::publish_all;
use postroom_testkit::recording::BROKER_CLOCK_RATE;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Timeline {
    /// When each retry of a message was due.
    due: HashMap<MessageId, Vec<Instant>>,
    /// When each receive of a message happened.
    received: HashMap<MessageId, Vec<Instant>>,
}

struct Timed {
    inner: SqsSubscriber,
    log: Arc<Mutex<Timeline>>,
}

struct TimedDelivery {
    inner: SqsDelivery,
    log: Arc<Mutex<Timeline>>,
}

#[postroom_core::async_trait]
impl Delivery for TimedDelivery {
    fn message(&self) -> &ReceivedMessage {
        self.inner.message()
    }
    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        let log = self.log;
        self.inner
            .ack()
            .await
            .map_err(|(e, d)| (e, Self { inner: d, log }))
    }
    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        let id = self.inner.message().stable_id();
        let scheduled = Instant::now();
        let log = self.log;
        self.inner.retry(plan).await.map_err(|(e, d)| {
            (
                e,
                Self {
                    inner: d,
                    log: log.clone(),
                },
            )
        })?;
        log.lock()
            .unwrap()
            .due
            .entry(id)
            .or_default()
            // moto keeps the visibility timeout on the system clock: the allowance for a
            // broker clock that follows it while NTP corrects it.
            .push(scheduled + plan.delay.mul_f64(1.0 - BROKER_CLOCK_RATE));
        Ok(())
    }
    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        let log = self.log;
        self.inner
            .park(record)
            .await
            .map_err(|(e, d)| (e, Self { inner: d, log }))
    }
}

#[postroom_core::async_trait]
impl Subscriber for Timed {
    type Delivery = TimedDelivery;
    async fn next(&mut self, max_wait: Duration) -> Result<Option<TimedDelivery>> {
        let got = self.inner.next(max_wait).await?;
        Ok(got.map(|inner| {
            self.log
                .lock()
                .unwrap()
                .received
                .entry(inner.message().stable_id())
                .or_default()
                .push(Instant::now());
            TimedDelivery {
                inner,
                log: self.log.clone(),
            }
        }))
    }
    async fn close(&mut self) {
        self.inner.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_receive_of_a_retried_message_comes_after_its_due_time() {
    let t = TestSqs::new().await;
    let transport = t.transport(t.config()).await;
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::with_inbox(
        store_at(&dir.path().join("t.db")).await,
        "timing",
        Mode::FailBelow(3),
    );
    // Jitter on: delays of 1–1.5 s, 2–3 s and 2–3 s, not whole seconds.
    let retry = RetryPolicy {
        ladder: "1s,2s".parse().unwrap(),
        max_retries: 3,
        max_unknown_retries: 1,
        max_age: None,
        jitter: 0.5,
    };
    let consumer = Consumer::for_transport(
        config("timing", retry, 4, Ordering::Unordered),
        probe.clone(),
        &transport.capabilities(),
    )
    .unwrap();
    let log = Arc::new(Mutex::new(Timeline::default()));
    let sub = Timed {
        inner: subscriber_of(&transport, "timing", &["order.created"], 4).await,
        log: log.clone(),
    };
    let stats = consumer.stats();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move { consumer.run(sub, rx).await });
    let envs: Vec<_> = (0..3).map(|i| order(&format!("due{i}"), 1)).collect();
    let messages: Vec<_> = envs
        .iter()
        .map(|e| OutgoingMessage::from_envelope(e, "order.created"))
        .collect();
    publish_all(transport.publisher().as_ref(), &messages).await;
    assert!(
        eventually(Duration::from_secs(40), || async {
            stats.snapshot().applied == 3
        })
        .await,
        "applied after three retries each"
    );
    stop.send(true)
        .expect("the consumer is still listening for its stop");
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the consumer stops within 30 s")
        .expect("the consumer task did not panic");
    let log = log.lock().unwrap();
    for e in &envs {
        let due = &log.due[&e.id];
        let received = &log.received[&e.id];
        assert_eq!(due.len(), 3, "three retries");
        assert_eq!(
            received.len(),
            4,
            "one receive per attempt: no early or extra receive"
        );
        for (k, (due, got)) in due.iter().zip(&received[1..]).enumerate() {
            assert!(
                got >= due,
                "receive {} of {} came {:?} before its retry was due",
                k + 1,
                e.id,
                *due - *got
            );
        }
        let attempts: Vec<u32> = probe.calls_for(e.id).iter().map(|c| c.attempt).collect();
        assert_eq!(attempts, vec![0, 1, 2, 3]);
    }
}
