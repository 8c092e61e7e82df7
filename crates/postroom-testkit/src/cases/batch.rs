//! The batched consumer on every backend: each message applied once with its inbox row in one
//! transaction per batch; a poison message or a transient failure inside a batch does not
//! park or retry its neighbours; a crash after the batch's commit before its acks loses
//! nothing and applies nothing twice.

use super::*;
use async_trait::async_trait;
use postroom_core::consumer::{BatchConfig, BatchConsumer};
use postroom_core::{
    BatchHandler, ErrorClass, Handled, HandlerError, Incoming, MessageId, OutgoingMessage,
};
use std::collections::HashSet;
use std::sync::Mutex;

/// A batch handler applying `effect:<aggregate id>` for a whole batch in one transaction,
/// with faults tied to aggregate ids: a poison id fails any batch that holds it (the
/// transaction rolls back, as a constraint violation would); a flaky id fails any batch that
/// holds its first delivery, transiently.
pub struct BatchEffectHandler {
    backend: Arc<Backend>,
    consumer: String,
    poison: HashSet<String>,
    flaky: HashSet<String>,
    calls: Mutex<Vec<Vec<(MessageId, u32)>>>,
}

impl BatchEffectHandler {
    /// A handler for `consumer` with these faults.
    pub fn new(
        backend: Arc<Backend>,
        consumer: &str,
        poison: &[&str],
        flaky: &[&str],
    ) -> Arc<Self> {
        Arc::new(Self {
            backend,
            consumer: consumer.into(),
            poison: poison.iter().map(|s| (*s).to_string()).collect(),
            flaky: flaky.iter().map(|s| (*s).to_string()).collect(),
            calls: Mutex::new(Vec::new()),
        })
    }

    /// Every call: the (id, attempt) of each message in it.
    pub fn calls(&self) -> Vec<Vec<(MessageId, u32)>> {
        self.calls.lock().unwrap().clone()
    }

    /// Whether some call held more than one message: batches formed.
    pub fn batches_formed(&self) -> bool {
        self.calls().iter().any(|c| c.len() > 1)
    }

    /// Whether `id` was handed over, on its first delivery, in one call with at least one
    /// message of `others`.
    pub fn shared_a_batch(&self, id: MessageId, others: &[MessageId]) -> bool {
        self.calls()
            .iter()
            .any(|c| c.contains(&(id, 0)) && c.iter().any(|(o, _)| *o != id && others.contains(o)))
    }

    /// Calls that held `id`, with the attempt it was on.
    pub fn attempts_of(&self, id: MessageId) -> Vec<u32> {
        self.calls()
            .iter()
            .flatten()
            .filter(|(i, _)| *i == id)
            .map(|(_, a)| *a)
            .collect()
    }
}

#[async_trait]
impl BatchHandler for BatchEffectHandler {
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError> {
        self.calls
            .lock()
            .unwrap()
            .push(batch.iter().map(|m| (m.envelope.id, m.attempt)).collect());
        for m in batch {
            let agg = &m.envelope.aggregate.id;
            if self.poison.contains(agg) {
                return Err(HandlerError::permanent(
                    "constraint_violation",
                    format!("injected: {agg} violates a constraint; the batch rolled back"),
                ));
            }
            if self.flaky.contains(agg) && m.attempt == 0 {
                return Err(HandlerError::transient(
                    "dependency_down",
                    format!("injected: {agg} hit a transient failure; the batch rolled back"),
                ));
            }
        }
        let items: Vec<(MessageId, String)> = batch
            .iter()
            .map(|m| (m.envelope.id, effect_key(&m.envelope)))
            .collect();
        let results = self
            .backend
            .apply_effects(&self.consumer, &items)
            .await
            .map_err(HandlerError::from)?;
        Ok(results.into_iter().map(Ok).collect())
    }
}

/// Lanes of the suite's batched consumer.
const LANES: usize = 2;
/// Most messages per batch of the suite's batched consumer.
const BATCH_SIZE: usize = 8;

/// Start a batched consumer (2 lanes, batches of up to 8, 50 ms linger), subscribed with
/// room in flight for a full batch per lane.
pub async fn start_batch_consumer(
    b: &Arc<Backend>,
    name: &str,
    topics: &[&str],
    handler: Arc<BatchEffectHandler>,
) -> Running {
    let prefetch = Some(LANES * BATCH_SIZE);
    let (sub, mut cfg, recorder) =
        suite_setup_with_prefetch(b, name, topics, policy(b), prefetch).await;
    cfg.concurrency = LANES;
    let batch = BatchConfig {
        max_size: BATCH_SIZE,
        linger: Duration::from_millis(50),
    };
    let consumer = BatchConsumer::for_transport(cfg, batch, handler, &b.transport().capabilities())
        .expect("the transport keeps the suite's consumer settings");
    Running::new(
        crate::running::Running::start(consumer.stats(), move |rx| async move {
            consumer.run(sub, rx).await
        }),
        recorder,
    )
}

/// Write `good` to the outbox for `topic` with `odd` placed after its first `at` messages, so
/// that `odd` travels inside a batch with neighbours on both sides.
async fn produce_with_one_inside(
    b: &Arc<Backend>,
    topic: &str,
    good: &[Envelope],
    at: usize,
    odd: &Envelope,
) {
    let (before, after) = good.split_at(at);
    for e in before.iter().chain([odd]).chain(after) {
        b.produce(e, topic).await.unwrap();
    }
}

/// A batch holding a poison message is split until the poison stands alone: it is parked with
/// its diagnostics, its neighbours are applied once each and never retried or parked; a
/// duplicate delivery inside the run is absorbed.
pub async fn batch_isolates_a_poison_message(b: &Arc<Backend>) {
    let (c, topic) = (unique("bpoison"), unique("t.bpoison."));
    let h = BatchEffectHandler::new(b.clone(), &c, &["bp-poison"], &[]);
    let run = start_batch_consumer(b, &c, &[&topic], h.clone()).await;
    let good: Vec<Envelope> = (0..9).map(|i| order(&format!("bp{i}"), 1)).collect();
    let poison = order("bp-poison", 1);
    produce_with_one_inside(b, &topic, &good, 4, &poison).await;
    relay_all(b, "r1").await;
    b.publisher()
        .publish(&OutgoingMessage::from_envelope(&good[0], &topic))
        .await
        .unwrap();
    until(
        Duration::from_secs(30),
        "the good messages applied and the poison parked",
        || async { effects_of(b, &c, &good).await == 9 && !parked_of(b, &c).await.is_empty() },
    )
    .await;
    until(
        Duration::from_secs(20),
        "the duplicate delivery is absorbed",
        || async { run.stats().duplicates >= 1 },
    )
    .await;
    let stats = run.stop().await;
    for e in &good {
        assert_eq!(
            effect_of(b, &c, e).await,
            1,
            "{} applied once",
            e.aggregate.id
        );
        assert!(
            h.attempts_of(e.id).iter().all(|a| *a == 0),
            "a neighbour of the poison is never retried"
        );
    }
    let parked = parked_of(b, &c).await;
    assert_eq!(parked.len(), 1, "only the poison is parked");
    assert_eq!(parked[0].message_id, poison.id);
    assert_eq!(parked[0].error_class, ErrorClass::Permanent);
    assert_eq!(parked[0].error_code, "constraint_violation");
    assert!(stats.retries_by_stage.is_empty(), "nothing retried");
    assert_eq!(stats.applied, 9);
    let good_ids: Vec<MessageId> = good.iter().map(|e| e.id).collect();
    assert!(
        h.batches_formed(),
        "batches of more than one message formed: {:?}",
        h.calls()
    );
    assert!(
        h.shared_a_batch(poison.id, &good_ids),
        "the poison was handed over in one batch with good messages: {:?}",
        h.calls()
    );
}

/// A transient failure of one message inside a batch retries that message only, after its
/// due time; the others are applied on their first delivery.
pub async fn batch_retries_only_the_failing_message(b: &Arc<Backend>) {
    let (c, topic) = (unique("bflaky"), unique("t.bflaky."));
    let h = BatchEffectHandler::new(b.clone(), &c, &[], &["bf-flaky"]);
    let run = start_batch_consumer(b, &c, &[&topic], h.clone()).await;
    let good: Vec<Envelope> = (0..6).map(|i| order(&format!("bf{i}"), 1)).collect();
    let flaky = order("bf-flaky", 1);
    produce_with_one_inside(b, &topic, &good, 3, &flaky).await;
    relay_all(b, "r1").await;
    until(
        ladder_walk(b),
        "everything applied, the flaky one after its retry",
        || async {
            effects_of(b, &c, &good).await == 6
                && b.effect_count(&c, "effect:bf-flaky").await.unwrap() == 1
        },
    )
    .await;
    let recorder = run.recorder();
    let stats = run.stop().await;
    assert_eq!(
        stats.retries_by_stage.values().sum::<u64>(),
        1,
        "one retry in all"
    );
    assert_eq!(h.attempts_of(flaky.id).last(), Some(&1));
    for e in &good {
        assert!(
            h.attempts_of(e.id).iter().all(|a| *a == 0),
            "neighbours never retried"
        );
    }
    assert_eq!(recorder.assert_never_early(flaky.id), 1);
    assert!(parked_of(b, &c).await.is_empty());
    let good_ids: Vec<MessageId> = good.iter().map(|e| e.id).collect();
    assert!(
        h.batches_formed(),
        "batches of more than one message formed: {:?}",
        h.calls()
    );
    assert!(
        h.shared_a_batch(flaky.id, &good_ids),
        "the failing message was handed over in one batch with good messages: {:?}",
        h.calls()
    );
}

/// The batched consumer crashes after the batch's commit, before its acks (the crash point
/// between them): every message comes back, the inbox absorbs each, nothing is applied twice.
pub async fn batch_crash_after_commit_before_ack(b: &Arc<Backend>) {
    use postroom_core::failpoint::{self, Action};
    let (c, topic) = (unique("bcrash"), unique("t.bcrash."));
    failpoint::arm_for(failpoint::BATCH_AFTER_COMMIT, &c, Action::Panic, 0, Some(1));
    let h = BatchEffectHandler::new(b.clone(), &c, &[], &[]);
    let envs: Vec<Envelope> = (0..4).map(|i| order(&format!("bc{i}"), 1)).collect();
    for e in &envs {
        b.produce(e, &topic).await.unwrap();
    }
    let run = start_batch_consumer(b, &c, &[&topic], h.clone()).await;
    relay_all(b, "r1").await;
    until_reached(
        failpoint::BATCH_AFTER_COMMIT,
        &c,
        "a batch committed and reached the point before its acks",
    )
    .await;
    // The lane that crashed takes the consumer down with it; start it again. A transport may
    // give the crashed batch's copies back to the first run before it stops (a consumer
    // group's rebalance): count what either run absorbed.
    let first = run.stop().await;
    let run = start_batch_consumer(b, &c, &[&topic], h.clone()).await;
    // The copies come back once the crashed consumer's hold on them ends (a lease, a
    // visibility timeout, a consumer group's session): a loaded machine stretches that.
    let wait = b.caps().redelivery_after * 6 + Duration::from_secs(30);
    until(wait, "every message applied", || async {
        effects_of(b, &c, &envs).await == 4
    })
    .await;
    until(
        wait,
        "the messages of the crashed batch came back and were absorbed",
        || async { first.duplicates + run.stats().duplicates >= 1 },
    )
    .await;
    run.stop().await;
    for e in &envs {
        assert_eq!(effect_of(b, &c, e).await, 1, "nothing applied twice");
    }
}
