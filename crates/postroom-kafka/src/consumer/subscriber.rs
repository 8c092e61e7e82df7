//! The subscriber: a consumer group member (`enable.auto.commit=false`,
//! `enable.auto.offset.store=false`, reading from the earliest offset when the group has none)
//! on the consumer's topics, its stage topics and its redrive topic. A poll thread owns the
//! librdkafka consumer; records reach [`next`](postroom_core::Subscriber::next) through a
//! channel, at most `prefetch` of them unsettled at a time.

use super::chain::{Chains, Route as ChainRoute};
use super::context::RebalanceContext;
use super::delivery::KafkaDelivery;
use super::record::{Fetched, Record};
use super::state::{Limits, Shared, State};
use crate::config::{KafkaConfig, RetryOrdering};
use crate::error::kafka;
use crate::headers::{FOLLOWS, set_due_in};
use crate::naming::{ConsumerTopics, route_of};
use crate::producer::{KafkaProducer, Outbound};
use postroom_core::backoff::Backoff;
use postroom_core::message::headers as h;
use postroom_core::transport::check_prefetch;
use postroom_core::{Error, ErrorKind, ReceivedMessage, Result, RetryLadder, Subscriber};
use rdkafka::consumer::BaseConsumer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// What a consumer reads and how.
#[derive(Clone, Debug)]
pub struct SubscriberSpec {
    /// Consumer group.
    pub group: String,
    /// Topics read by name.
    pub topics: Vec<String>,
    /// Route patterns (`*`, `#`): the member reads every topic under the prefix whose route
    /// one of them matches, except topics shaped like a consumer's own.
    pub patterns: Vec<String>,
    /// Unsettled records at most.
    pub prefetch: usize,
    /// Retry ordering policy.
    pub ordering: RetryOrdering,
    /// Stage topics are read (a work consumer) or not (the parking ingest).
    pub stages: bool,
}

/// What the deliveries of one subscriber share with it.
pub(crate) struct DeliveryContext {
    pub(crate) shared: Arc<Shared>,
    pub(crate) producer: Arc<KafkaProducer>,
    pub(crate) names: ConsumerTopics,
    pub(crate) ladder: RetryLadder,
    pub(crate) prefix: String,
    pub(crate) ordering: RetryOrdering,
    pub(crate) chains: Chains,
    backoff: Mutex<Backoff>,
}

impl DeliveryContext {
    /// The pause before a partition is read again after an unsettled delivery: grows while
    /// settling keeps failing, so a broken route does not turn into a hot loop.
    pub(crate) fn rewind_pause(&self) -> Duration {
        self.backoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .next_delay()
    }

    pub(crate) fn settled_ok(&self) {
        self.backoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .reset();
    }
}

/// A [`Subscriber`] on Kafka.
pub struct KafkaSubscriber {
    ctx: Arc<DeliveryContext>,
    rx: UnboundedReceiver<Fetched>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Receives once the poll thread has closed the consumer.
    closed: Option<Mutex<std::sync::mpsc::Receiver<()>>>,
    patterns: Vec<String>,
    exact: Vec<String>,
}

postroom_core::debug_showing!(KafkaSubscriber {
    group: ctx.names.group
});

impl KafkaSubscriber {
    /// Join `spec.group` for `consumer` and start reading.
    pub fn start(
        config: &KafkaConfig,
        producer: Arc<KafkaProducer>,
        consumer: &str,
        spec: SubscriberSpec,
    ) -> Result<Self> {
        check_prefetch(spec.prefetch)?;
        let names = ConsumerTopics::new(&config.prefix, consumer);
        let mut topics = spec.topics.clone();
        let stage_topics = if spec.stages {
            names.retries(&config.ladder)
        } else {
            Vec::new()
        };
        topics.extend(stage_topics.iter().cloned());
        topics.sort();
        topics.dedup();
        let (tx, rx) = unbounded_channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            settled: Condvar::new(),
            stop: AtomicBool::new(false),
            limits: Limits {
                prefetch: spec.prefetch,
                blocking: spec.ordering == RetryOrdering::Blocking,
                revoke_wait: config.revoke_wait,
            },
            stage_topics,
            tx,
            consumer: Mutex::new(std::sync::Weak::new()),
            label: spec.group.clone(),
        });
        let session = config.session_timeout.as_millis().max(6000);
        let mut client = config.client();
        client
            .set("group.id", &spec.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("session.timeout.ms", session.to_string())
            .set("heartbeat.interval.ms", (session / 4).to_string())
            .set("topic.metadata.refresh.interval.ms", "2000");
        let base: BaseConsumer<RebalanceContext> = client
            .create_with_context(RebalanceContext {
                shared: shared.clone(),
            })
            .map_err(|e| kafka("creating the Kafka consumer", e))?;
        let mut subscription = super::topics::Topics::new(config, topics, spec.patterns.clone())?;
        subscription.subscribe(&base, &spec.group)?;
        let base = Arc::new(base);
        *shared
            .consumer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::downgrade(&base);
        let ledger = if spec.stages {
            Some(super::ledger::Ledger::open(
                config,
                names.deliveries.clone(),
                producer.clone(),
            )?)
        } else {
            None
        };
        let every = config.commit_interval;
        let thread_shared = shared.clone();
        let (closed_tx, closed) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("postroom-kafka-{consumer}"))
            .spawn(move || {
                super::poller::run(base, subscription, thread_shared, every, ledger);
                let _ = closed_tx.send(());
            })
            .map_err(|e| Error::new(ErrorKind::Io, format!("starting the poll thread: {e}")))?;
        let ctx = Arc::new(DeliveryContext {
            shared,
            producer,
            names,
            ladder: config.ladder.clone(),
            prefix: config.prefix.clone(),
            ordering: spec.ordering,
            chains: Chains::default(),
            backoff: Mutex::new(Backoff::new(
                Duration::from_millis(100),
                Duration::from_secs(10),
            )),
        });
        Ok(Self {
            ctx,
            rx,
            thread: Some(thread),
            closed: Some(Mutex::new(closed)),
            patterns: spec.patterns,
            exact: spec.topics,
        })
    }

    /// Ask the poll thread to commit, close the consumer (leaving the group) and end; the
    /// receiver tells when it did.
    fn stop(&mut self) -> Option<std::sync::mpsc::Receiver<()>> {
        self.ctx.shared.stop.store(true, Ordering::SeqCst);
        // Never joined: librdkafka's destroy can hang when a topic was deleted under the
        // consumer, and a caller must not hang with it.
        drop(self.thread.take());
        self.closed.take().map(|m| {
            m.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        })
    }

    /// The route a record is known by: where it was first published, else its topic without
    /// the workload prefix.
    fn route(&self, r: &Record) -> String {
        r.headers
            .get(h::ORIGINAL_ROUTE)
            .cloned()
            .unwrap_or_else(|| route_of(&self.ctx.prefix, &r.topic).to_string())
    }

    fn delivery(&self, f: Fetched, key: Option<String>) -> KafkaDelivery {
        let r = &f.record;
        let mut message =
            ReceivedMessage::new(r.id, self.route(r), r.headers.clone(), r.body.clone());
        if r.deliveries > 0 {
            message = message
                .deliveries(r.deliveries)
                .redelivered(r.deliveries > 1);
        }
        KafkaDelivery {
            message,
            record: f.record,
            generation: f.generation,
            key,
            ctx: self.ctx.clone(),
            settled: false,
        }
    }

    /// Decide what happens to a fetched record the consumer loop may get: handled (returned),
    /// or, under per-key ordered retry, sent behind its key's earlier records, or kept until
    /// its key is free.
    async fn admit(&self, f: Fetched) -> Option<KafkaDelivery> {
        let topic = f.record.topic.clone();
        let stage = self.ctx.names.stage_of(&self.ctx.ladder, &topic);
        if !self.patterns.is_empty()
            && stage.is_none()
            && topic != self.ctx.names.redrive
            && !self.exact.contains(&topic)
        {
            let route = route_of(&self.ctx.prefix, &topic).to_string();
            if crate::naming::has_own_topic_shape(&route)
                || !self
                    .patterns
                    .iter()
                    .any(|p| postroom_core::pattern::matches(p, &route))
            {
                // Not expected (the member subscribes to what the patterns match, see topics.rs),
                // kept as a guard: a topic the patterns do not take, or another consumer's
                // own topic (its parking, redrive, ledger or a stage): not ours.
                let mut d = self.delivery(f, None);
                d.settled = true;
                let _ = self
                    .ctx
                    .shared
                    .settle(&d.record.tp(), d.record.offset, d.generation);
                return None;
            }
        }
        if self.ctx.ordering != RetryOrdering::PerKeyRetry {
            return Some(self.delivery(f, None));
        }
        let Some(key) = f.record.ordering_key() else {
            return Some(self.delivery(f, None));
        };
        let id = f.record.id.unwrap_or_else(|| {
            ReceivedMessage::new(None, "", Default::default(), f.record.body.clone()).stable_id()
        });
        let (route, f) = self.ctx.chains.route(&key, id, stage.is_some(), f);
        let f = f?;
        match route {
            ChainRoute::Wait => None,
            ChainRoute::Handle => Some(self.delivery(f, Some(key))),
            ChainRoute::Follow(to) => {
                self.follow(f, key, id, to).await;
                None
            }
        }
    }

    /// Send a record behind the earlier records of its key, in stage `to`, unhandled (its
    /// attempt unchanged); then the original is done.
    async fn follow(&self, f: Fetched, key: String, id: postroom_core::MessageId, to: usize) {
        let delay = self.ctx.ladder.delay(to);
        let mut headers = f.record.headers.clone();
        headers
            .entry(h::ORIGINAL_ROUTE.into())
            .or_insert_with(|| route_of(&self.ctx.prefix, &f.record.topic).to_string());
        headers.insert(FOLLOWS.into(), "1".into());
        set_due_in(&mut headers, delay);
        let topic = self.ctx.names.retry(delay);
        let mut d = self.delivery(f, Some(key.clone()));
        let sent = self
            .ctx
            .producer
            .send(Outbound {
                topic: &topic,
                key: Some(&key),
                id,
                headers: &headers,
                body: &d.record.body,
            })
            .await;
        match sent {
            Ok(()) => {
                self.ctx.chains.placed(&key, id, to);
                d.settled = true;
                let outcome = self
                    .ctx
                    .shared
                    .settle(&d.record.tp(), d.record.offset, d.generation);
                tracing::debug!(key = %key, stage = to, ?outcome, "record follows its key into the retry path");
                self.ctx.chains.release(&key);
            }
            Err(e) => {
                // Dropped unsettled: its partition is read again after a pause.
                tracing::warn!(error = %e, "sending a record behind its key failed");
                drop(d);
            }
        }
    }
}

impl Drop for KafkaSubscriber {
    fn drop(&mut self) {
        // The poll thread commits what is stored and closes the consumer (leaving the group).
        // Wait for it: a member that joins the group before this one left can stall the
        // rebalance on some brokers (tansu), and a closed consumer hands its partitions over at
        // once.
        if let Some(closed) = self.stop() {
            let _ = closed.recv_timeout(CLOSE_WAIT);
        }
    }
}

/// How long closing waits for the consumer to leave its group.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

#[async_trait::async_trait]
impl Subscriber for KafkaSubscriber {
    type Delivery = KafkaDelivery;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<KafkaDelivery>> {
        let deadline = Instant::now() + max_wait;
        loop {
            while let Some(f) = self.ctx.chains.next_ready() {
                if !self.ctx.shared.current(&f.record.tp(), f.generation) {
                    let _ = self
                        .ctx
                        .shared
                        .settle(&f.record.tp(), f.record.offset, f.generation);
                    continue;
                }
                if let Some(d) = self.admit(f).await {
                    return Ok(Some(d));
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let slice = (deadline - now).min(Duration::from_millis(100));
            match tokio::time::timeout(slice, self.rx.recv()).await {
                Err(_) => {}
                Ok(None) => {
                    return Err(Error::new(
                        ErrorKind::Closed,
                        format!("the poll thread of {} stopped", self.ctx.names.group),
                    ));
                }
                Ok(Some(f)) => {
                    if !self
                        .ctx
                        .shared
                        .take(&f.record.tp(), f.record.offset, f.generation)
                    {
                        continue;
                    }
                    if let Some(d) = self.admit(f).await {
                        return Ok(Some(d));
                    }
                }
            }
        }
    }

    async fn close(&mut self) {
        if let Some(closed) = self.stop() {
            let _ = tokio::task::spawn_blocking(move || closed.recv_timeout(CLOSE_WAIT)).await;
        }
    }
}
