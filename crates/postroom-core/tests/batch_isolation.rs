//! The batched consumer isolates each message of a batch: one message that fails, on its own
//! result or by failing the whole batch, is retried or parked alone; the others of its batch
//! are acknowledged once and never retried or parked. The transport is an in-memory
//! subscriber that hands out a prepared queue and records how each delivery was settled; the
//! consumer's own logic is what is under test.

use postroom_core::message::headers as h;
use postroom_core::transport::Handback;
use postroom_core::{
    BatchConfig, BatchConsumer, BatchHandler, ConsumerConfig, Delivery, Envelope, EnvelopeDecoder,
    Handled, HandlerError, Headers, Incoming, MessageId, ParkedMessage, ReceivedMessage, RetryPlan,
    Subscriber, async_trait,
};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

#[derive(Clone, Debug, PartialEq)]
enum Settled {
    Ack,
    Retry(u32),
    Park(String),
}

type Log = Arc<Mutex<Vec<(MessageId, Settled)>>>;

struct Memory {
    queue: VecDeque<ReceivedMessage>,
    log: Log,
}

struct MemoryDelivery {
    msg: ReceivedMessage,
    log: Log,
}

impl MemoryDelivery {
    fn note(&self, s: Settled) {
        let id = self.msg.id.expect("every test message has an id");
        self.log.lock().unwrap().push((id, s));
    }
}

#[async_trait]
impl Delivery for MemoryDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.msg
    }
    async fn ack(self) -> Result<(), Handback<Self>> {
        self.note(Settled::Ack);
        Ok(())
    }
    async fn retry(self, plan: &RetryPlan) -> Result<(), Handback<Self>> {
        self.note(Settled::Retry(plan.attempt));
        Ok(())
    }
    async fn park(self, record: &ParkedMessage) -> Result<(), Handback<Self>> {
        self.note(Settled::Park(record.error_code.clone()));
        Ok(())
    }
}

#[async_trait]
impl Subscriber for Memory {
    type Delivery = MemoryDelivery;
    async fn next(&mut self, max_wait: Duration) -> postroom_core::Result<Option<MemoryDelivery>> {
        match self.queue.pop_front() {
            Some(msg) => Ok(Some(MemoryDelivery {
                msg,
                log: self.log.clone(),
            })),
            None => {
                tokio::time::sleep(max_wait.min(Duration::from_millis(5))).await;
                Ok(None)
            }
        }
    }
}

/// One message per key, `order.created` version 1 of aggregate `key`.
fn message(key: &str) -> (MessageId, ReceivedMessage) {
    let env = Envelope::builder("order.created", "test")
        .aggregate("order", key, 1)
        .data(serde_json::json!({ "key": key }))
        .build();
    let mut headers = Headers::new();
    headers.insert(h::AGGREGATE_KEY.into(), env.aggregate.key());
    let id = env.id;
    (
        id,
        ReceivedMessage::new(Some(id), "order.created", headers, env.to_bytes()),
    )
}

/// How a batch handler treats the keys it is given.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// Its own result is a transient failure; the others of the batch apply.
    OwnTransient,
    /// Its own result is a permanent failure; the others of the batch apply.
    OwnPermanent,
    /// Any batch that holds it fails as a whole (the transaction rolled back).
    FailsTheBatch,
}

/// Applies every message but the faulty key, and records each call's keys.
struct Faulty {
    key: String,
    fault: Fault,
    calls: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl BatchHandler for Faulty {
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError> {
        let keys: Vec<String> = batch
            .iter()
            .map(|m| m.envelope.aggregate.id.clone())
            .collect();
        self.calls.lock().unwrap().push(keys.clone());
        if self.fault == Fault::FailsTheBatch && keys.contains(&self.key) {
            return Err(HandlerError::permanent(
                "constraint_violation",
                "the batch rolled back",
            ));
        }
        Ok(keys
            .iter()
            .map(|k| match (k == &self.key, self.fault) {
                (true, Fault::OwnTransient) => {
                    Err(HandlerError::transient("dependency_down", "try again"))
                }
                (true, Fault::OwnPermanent) => Err(HandlerError::permanent("bad_sku", "no such")),
                _ => Ok(Handled::Applied),
            })
            .collect())
    }
}

struct Outcome {
    /// How each message was settled, in settling order.
    settled: HashMap<MessageId, Vec<Settled>>,
    /// The keys of each handler call.
    calls: Vec<Vec<String>>,
}

/// Run a batched consumer (one lane, batches of up to 8) over eight messages `k0`..`k7`, the
/// handler failing `k3` as `fault` says, until everything is settled.
async fn run(fault: Fault) -> (Vec<MessageId>, Outcome) {
    let (ids, queue): (Vec<_>, VecDeque<_>) = (0..8).map(|i| message(&format!("k{i}"))).unzip();
    let handler = Arc::new(Faulty {
        key: "k3".into(),
        fault,
        calls: Mutex::new(Vec::new()),
    });
    let mut cfg = ConsumerConfig::new(
        "inventory",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.concurrency = 1;
    cfg.breaker.failure_threshold = 0;
    let batch = BatchConfig {
        max_size: 8,
        linger: Duration::from_millis(200),
    };
    let consumer = BatchConsumer::new(cfg, batch, handler.clone());
    let log = Log::default();
    let sub = Memory {
        queue,
        log: log.clone(),
    };
    let (stop, rx) = watch::channel(false);
    let settled = {
        let log = log.clone();
        async move {
            for _ in 0..400 {
                if log.lock().unwrap().len() >= 8 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            stop.send(true).expect("the consumer listens for its stop");
        }
    };
    tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(consumer.run(sub, rx), settled);
    })
    .await
    .expect("the consumer stops after its shutdown");
    let mut by_id: HashMap<MessageId, Vec<Settled>> = HashMap::new();
    for (id, s) in log.lock().unwrap().iter() {
        by_id.entry(*id).or_default().push(s.clone());
    }
    let calls = handler.calls.lock().unwrap().clone();
    (
        ids,
        Outcome {
            settled: by_id,
            calls,
        },
    )
}

/// Every message but `k3` acknowledged exactly once; `k3` settled once as `expected`; the
/// first call held all eight (the batch formed, with the faulty message inside it).
fn assert_isolated(ids: &[MessageId], out: &Outcome, expected: &Settled) {
    assert_eq!(
        out.calls.first().map(Vec::len),
        Some(8),
        "the eight messages formed one batch: {:?}",
        out.calls
    );
    for (i, id) in ids.iter().enumerate() {
        let got = out.settled.get(id).cloned().unwrap_or_default();
        if i == 3 {
            assert_eq!(got, vec![expected.clone()], "k3 settled once, alone");
        } else {
            assert_eq!(got, vec![Settled::Ack], "k{i} acknowledged once");
        }
    }
}

#[tokio::test]
async fn a_transient_failure_of_one_message_retries_only_that_message() {
    let (ids, out) = run(Fault::OwnTransient).await;
    assert_isolated(&ids, &out, &Settled::Retry(1));
    assert_eq!(out.calls.len(), 1, "its own result needs no second call");
}

#[tokio::test]
async fn a_permanent_failure_of_one_message_parks_only_that_message() {
    let (ids, out) = run(Fault::OwnPermanent).await;
    assert_isolated(&ids, &out, &Settled::Park("bad_sku".into()));
    assert_eq!(out.calls.len(), 1, "its own result needs no second call");
}

#[tokio::test]
async fn a_message_that_fails_its_whole_batch_is_split_out_and_parked_alone() {
    let (ids, out) = run(Fault::FailsTheBatch).await;
    assert_isolated(&ids, &out, &Settled::Park("constraint_violation".into()));
    assert!(
        out.calls.contains(&vec!["k3".to_string()]),
        "k3 was tried on its own: {:?}",
        out.calls
    );
}
