//! Unit tests of the loop's own logic with an in-memory subscriber. The behaviour against
//! real servers is proven by the conformance suite and the fault tests.

use super::*;
use crate::envelope::Envelope;
use crate::handler::Incoming;
use crate::message::headers as h;
use crate::outcome::{Handled, HandlerError, RetryPlan};
use crate::parking::ParkedMessage;
use crate::transport::{Handback, ReceivedMessage};
use async_trait::async_trait;
use std::collections::VecDeque;
use std::sync::Mutex;

#[derive(Clone, Debug, PartialEq)]
enum Settled {
    Ack,
    Retry(u32),
    Park(String),
}

type Log = Arc<Mutex<Vec<(String, Settled)>>>;

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
        let key = String::from_utf8_lossy(&self.msg.body).into_owned();
        self.log.lock().unwrap().push((key, s));
    }
}

#[async_trait]
impl Delivery for MemoryDelivery {
    fn message(&self) -> &ReceivedMessage {
        &self.msg
    }
    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        self.note(Settled::Ack);
        Ok(())
    }
    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        self.note(Settled::Retry(plan.attempt));
        Ok(())
    }
    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        self.note(Settled::Park(record.error_code.clone()));
        Ok(())
    }
}

#[async_trait]
impl Subscriber for Memory {
    type Delivery = MemoryDelivery;
    async fn next(&mut self, max_wait: Duration) -> crate::Result<Option<MemoryDelivery>> {
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

fn envelope_message(key: &str, seq: u64) -> ReceivedMessage {
    let env = Envelope::builder("t", "test")
        .aggregate("k", key, seq)
        .data(serde_json::json!({ "key": key, "seq": seq }))
        .build();
    let mut headers = crate::Headers::new();
    headers.insert(h::AGGREGATE_KEY.into(), env.aggregate.key());
    ReceivedMessage::new(Some(env.id), "t", headers, env.to_bytes())
}

fn decoder() -> EnvelopeDecoder {
    EnvelopeDecoder::new().accept("t", 1..=1)
}

/// Records the (key, seq) it handled, sleeping longer for low sequence numbers so that
/// an unordered loop would finish them out of order.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(String, u64)>>,
    in_flight: Mutex<std::collections::HashMap<String, u32>>,
    overlap: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Handler for Recorder {
    async fn handle(&self, m: &Incoming) -> std::result::Result<Handled, HandlerError> {
        let key = m.envelope.aggregate.id.clone();
        {
            let mut f = self.in_flight.lock().unwrap();
            let n = f.entry(key.clone()).or_default();
            *n += 1;
            if *n > 1 {
                self.overlap
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let v = m.envelope.aggregate.version;
        tokio::time::sleep(Duration::from_millis(30 / v)).await;
        self.seen.lock().unwrap().push((key.clone(), v));
        *self.in_flight.lock().unwrap().get_mut(&key).unwrap() -= 1;
        Ok(Handled::Applied)
    }
}

async fn run_to_end<H: Handler>(consumer: &Consumer<H>, sub: Memory, settle: Duration) {
    let (tx, rx) = watch::channel(false);
    let stop = async {
        tokio::time::sleep(settle).await;
        let _ = tx.send(true);
    };
    tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(consumer.run(sub, rx), stop);
    })
    .await
    .expect("the loop stops after its shutdown");
}

/// Runs `consumer` over `queue` until `settle` has passed and returns how each message was
/// settled, in settling order.
async fn settle_all<H: Handler>(
    consumer: &Consumer<H>,
    queue: VecDeque<ReceivedMessage>,
    settle: Duration,
) -> Vec<(String, Settled)> {
    let log = Log::default();
    run_to_end(
        consumer,
        Memory {
            queue,
            log: log.clone(),
        },
        settle,
    )
    .await;
    log.lock().unwrap().clone()
}

#[tokio::test]
async fn a_dropped_shutdown_sender_stops_the_loop() {
    struct Ok_;
    #[async_trait]
    impl Handler for Ok_ {
        async fn handle(&self, _: &Incoming) -> std::result::Result<Handled, HandlerError> {
            Ok(Handled::Applied)
        }
    }
    let consumer = Consumer::new(ConsumerConfig::new("c", decoder()), Arc::new(Ok_));
    let (tx, rx) = watch::channel(false);
    drop(tx);
    let sub = Memory {
        queue: VecDeque::new(),
        log: Log::default(),
    };
    tokio::time::timeout(Duration::from_secs(2), consumer.run(sub, rx))
        .await
        .expect("the loop ends");
}

#[tokio::test]
async fn per_key_ordering_handles_one_key_at_a_time_in_arrival_order() {
    let mut queue = VecDeque::new();
    for seq in 1..=5 {
        for key in ["a", "b", "c"] {
            queue.push_back(envelope_message(key, seq));
        }
    }
    let recorder = Arc::new(Recorder::default());
    let mut cfg = ConsumerConfig::new("c", decoder());
    cfg.concurrency = 4;
    cfg.ordering = Ordering::PerKey;
    let consumer = Consumer::new(cfg, recorder.clone());
    let log = settle_all(&consumer, queue, Duration::from_millis(600)).await;
    assert!(
        !recorder.overlap.load(std::sync::atomic::Ordering::SeqCst),
        "two deliveries of one key ran at once"
    );
    let seen = recorder.seen.lock().unwrap().clone();
    for key in ["a", "b", "c"] {
        let order: Vec<u64> = seen
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(order, vec![1, 2, 3, 4, 5], "key {key} out of order");
    }
    assert_eq!(log.len(), 15, "every delivery settled");
}

#[tokio::test]
async fn a_handler_panic_is_an_unknown_error_with_bounded_retries_then_park() {
    struct Panics;
    #[async_trait]
    impl Handler for Panics {
        async fn handle(&self, _: &Incoming) -> std::result::Result<Handled, HandlerError> {
            panic!("boom in the handler")
        }
    }
    let mut cfg = ConsumerConfig::new("c", decoder());
    cfg.retry = cfg.retry.clone().unknown_retries(1);
    let consumer = Consumer::new(cfg, Arc::new(Panics));
    let first = envelope_message("p", 1);
    let mut retried = envelope_message("q", 1);
    retried.headers.insert(h::RETRY_ATTEMPT.into(), "1".into());
    let log = settle_all(
        &consumer,
        VecDeque::from([first, retried]),
        Duration::from_millis(200),
    )
    .await;
    assert_eq!(log.len(), 2, "both settled: {log:?}");
    assert!(log.iter().any(|(_, s)| *s == Settled::Retry(1)), "{log:?}");
    assert!(
        log.iter()
            .any(|(_, s)| *s == Settled::Park(crate::outcome::codes::HANDLER_PANIC.into())),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_copy_at_the_crash_loop_bound_is_parked_without_handling() {
    let recorder = Arc::new(Recorder::default());
    let mut cfg = ConsumerConfig::new("c", decoder());
    cfg.max_deliveries = 3;
    let consumer = Consumer::new(cfg, recorder.clone());
    let log = settle_all(
        &consumer,
        VecDeque::from([
            envelope_message("x", 1).deliveries(2),
            envelope_message("y", 1).deliveries(3),
        ]),
        Duration::from_millis(200),
    )
    .await;
    let seen = recorder.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![("x".to_string(), 1)],
        "only the copy under the bound is handled"
    );
    assert!(
        log.iter()
            .any(|(_, s)| *s == Settled::Park(crate::outcome::codes::CRASH_LOOP.into()))
    );
}

#[test]
fn a_transport_that_cannot_keep_the_ladder_is_refused_at_construction() {
    use crate::transport::{DelayCapability, KeyOrdering, RedeliveryCounting};
    struct Never;
    #[async_trait]
    impl Handler for Never {
        async fn handle(&self, _: &Incoming) -> std::result::Result<Handled, HandlerError> {
            Ok(Handled::Applied)
        }
    }
    let caps = Capabilities {
        delay: DelayCapability::Stages("1s".parse().unwrap()),
        redelivery: RedeliveryCounting {
            counted: true,
            native_limit: Some(9),
        },
        ownership: None,
        ordering: KeyOrdering::None,
        max_message_bytes: 1 << 20,
    };
    let err = match Consumer::for_transport(
        ConsumerConfig::new("inventory", decoder()),
        Arc::new(Never),
        &caps,
    ) {
        Ok(_) => panic!("a ladder the transport lacks was accepted"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(
        text.contains("inventory") && text.contains("5s,30s,5m") && text.contains("1s"),
        "{text}"
    );
}

/// Capabilities of a transport that keeps any delay and dead-letters a copy by itself after
/// `native_limit` deliveries.
fn limited_to(native_limit: u32) -> Capabilities {
    use crate::transport::{DelayCapability, KeyOrdering, RedeliveryCounting};
    Capabilities {
        delay: DelayCapability::UpTo(Duration::from_secs(3600)),
        redelivery: RedeliveryCounting {
            counted: true,
            native_limit: Some(native_limit),
        },
        ownership: None,
        ordering: KeyOrdering::None,
        max_message_bytes: 1 << 20,
    }
}

struct Applies;
#[async_trait]
impl Handler for Applies {
    async fn handle(&self, _: &Incoming) -> std::result::Result<Handled, HandlerError> {
        Ok(Handled::Applied)
    }
}
#[async_trait]
impl crate::handler::BatchHandler for Applies {
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> std::result::Result<Vec<std::result::Result<Handled, HandlerError>>, HandlerError> {
        Ok(batch.iter().map(|_| Ok(Handled::Applied)).collect())
    }
}

/// Binding a step to its transport is the one place the crash-loop bound is lowered to the
/// transport's own limit; binding again never raises it.
#[test]
fn binding_to_a_transport_lowers_the_crash_loop_bound_to_its_limit() {
    let mut cfg = ConsumerConfig::new("c", decoder());
    cfg.max_deliveries = 10;
    let step = Step::new(cfg, Arc::new(Applies));
    assert_eq!(step.crash_loop_bound(), 10);
    let bound = step.bound_to(&limited_to(3)).unwrap();
    assert_eq!(bound.crash_loop_bound(), 3);
    assert_eq!(
        bound.bound_to(&limited_to(7)).unwrap().crash_loop_bound(),
        3
    );
}

/// A batched consumer its transport refuses is named in the refusal, as a per-message one is.
#[test]
fn a_refused_batched_consumer_is_named() {
    let caps = Capabilities {
        delay: crate::transport::DelayCapability::Stages("1s".parse().unwrap()),
        ..limited_to(9)
    };
    let err = match BatchConsumer::for_transport(
        ConsumerConfig::new("ledger", decoder()),
        BatchConfig::default(),
        Arc::new(Applies),
        &caps,
    ) {
        Ok(_) => panic!("a ladder the transport lacks was accepted"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(text.contains("\"ledger\"") && text.contains("1s"), "{text}");
}

mod trial {
    //! Whatever a trial message turns out to be, deciding it ends the trial: the breaker is
    //! never left waiting for a verdict that no path gives.
    use super::*;
    use crate::consumer::breaker::{Admission, BreakerState};
    use proptest::prelude::*;
    use std::time::Instant;

    #[derive(Clone, Copy, Debug)]
    enum Kind {
        Applied,
        Undecodable,
        CrashLooped,
        Transient,
        Permanent,
        Gap,
        Panics,
    }

    struct ByKind;
    #[async_trait]
    impl Handler for ByKind {
        async fn handle(&self, m: &Incoming) -> std::result::Result<Handled, HandlerError> {
            match m.envelope.aggregate.id.as_str() {
                "transient" => Err(HandlerError::transient("db_down", "down")),
                "permanent" => Err(HandlerError::permanent("bad", "bad")),
                "gap" => Err(crate::ordering::gap_error("k:gap", 1, 1)),
                "panics" => panic!("boom"),
                _ => Ok(Handled::Applied),
            }
        }
    }

    fn message(kind: Kind) -> ReceivedMessage {
        let named = |id: &str| envelope_message(id, 1);
        match kind {
            Kind::Applied => named("ok"),
            Kind::Undecodable => {
                ReceivedMessage::new(None, "t", crate::Headers::new(), b"{".to_vec())
            }
            Kind::CrashLooped => named("ok").deliveries(3),
            Kind::Transient => named("transient"),
            Kind::Permanent => named("permanent"),
            Kind::Gap => named("gap"),
            Kind::Panics => named("panics"),
        }
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Applied),
            Just(Kind::Undecodable),
            Just(Kind::CrashLooped),
            Just(Kind::Transient),
            Just(Kind::Permanent),
            Just(Kind::Gap),
            Just(Kind::Panics),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn every_trial_ends_with_a_verdict_or_neutral(kinds in proptest::collection::vec(kind(), 1..8)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let mut cfg = ConsumerConfig::new("c", decoder());
            cfg.max_deliveries = 3;
            cfg.breaker.failure_threshold = 1;
            let step = Step::new(cfg, Arc::new(ByKind));
            for k in kinds {
                let b = step.breaker();
                b.record_failure();
                let later = Instant::now() + Duration::from_secs(3600);
                prop_assert_eq!(b.admit_at(later), Admission::Pull);
                b.pulled_at(true, later);
                prop_assert_eq!(b.state(), BreakerState::HalfOpen(true));
                // What the per-message loop runs; the batch lanes and the inbox-queue
                // workers run the same screening and classification.
                let msg = message(k);
                rt.block_on(step.decide(&msg));
                prop_assert_ne!(b.state(), BreakerState::HalfOpen(true), "{:?} left the trial in flight", k);
            }
        }
    }
}
