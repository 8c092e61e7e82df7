//! A subscriber that records, per message id, when each delivery was received and when each
//! retry was scheduled with which delay, so the suite can measure every redelivery against its
//! due time (when the failure was settled plus the delay the transport keeps: the stage delay
//! on transports with fixed stages, the jittered delay on the others) — not the gap between
//! handler entries, where the previous attempt's handling time could hide an early retry.

use async_trait::async_trait;
use postroom_core::transport::Handback;
use postroom_core::{
    BoxDelivery, BoxSubscriber, Delivery, MessageId, ParkedMessage, ReceivedMessage, Result,
    RetryPlan, Subscriber,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much faster than this process's monotonic clock a broker's clock may run while it
/// keeps a delay. Some keep delays on the system clock (moto's SQS) or follow it: RabbitMQ's
/// runtime, while NTP corrects the system clock, speeds its own clock up or slows it down by at
/// most 1 % (ERTS's "time correction"). Measured
/// here once, the wall clock ran 0.5 % fast for minutes and every one-second retry arrived
/// 995–999 ms after it was scheduled. An early retry of the kind the suite looks for (a plain
/// requeue, a wrong stage, a delay not applied) misses its due time by far more.
pub const BROKER_CLOCK_RATE: f64 = 0.01;

/// What happened to one copy.
#[derive(Clone, Debug)]
pub enum Event {
    /// A delivery was received.
    Received {
        /// Message id.
        id: MessageId,
        /// When `next` returned it.
        at: Instant,
    },
    /// A retry was scheduled.
    Retried {
        /// Message id.
        id: MessageId,
        /// When the retry act was called (the copy cannot be due before this plus `delay`).
        at: Instant,
        /// The delay the transport keeps for it.
        delay: Duration,
    },
}

/// The log of a recording subscriber.
#[derive(Debug, Default)]
pub struct Recorder {
    events: Mutex<Vec<Event>>,
}

impl Recorder {
    fn push(&self, e: Event) {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(e);
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Deliveries received of `id`.
    pub fn receives(&self, id: MessageId) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::Received { id: i, .. } if *i == id))
            .count()
    }

    /// Panics when a delivery of `id` arrived before the due time of the retry scheduled
    /// before it (less [`BROKER_CLOCK_RATE`] of its delay); returns how many retries were
    /// checked.
    pub fn assert_never_early(&self, id: MessageId) -> usize {
        let mut due: Option<(Instant, Duration)> = None;
        let mut checked = 0;
        for e in self.events() {
            match e {
                Event::Retried { id: i, at, delay } if i == id => due = Some((at, delay)),
                Event::Received { id: i, at } if i == id => {
                    if let Some((scheduled, delay)) = due.take() {
                        let waited = at.saturating_duration_since(scheduled);
                        assert!(
                            waited >= delay.mul_f64(1.0 - BROKER_CLOCK_RATE),
                            "retry of {id} arrived {waited:?} after it was scheduled, before its delay of {delay:?}"
                        );
                        checked += 1;
                    }
                }
                _ => {}
            }
        }
        checked
    }
}

/// Wraps a subscriber and records what happens to its deliveries.
pub struct RecordingSubscriber {
    inner: BoxSubscriber,
    recorder: Arc<Recorder>,
    staged: bool,
}

impl RecordingSubscriber {
    /// Record `inner` into `recorder`; `staged` when the transport keeps fixed stage delays
    /// (a retry then waits its stage's delay, without jitter).
    pub fn new(inner: BoxSubscriber, recorder: Arc<Recorder>, staged: bool) -> Self {
        Self {
            inner,
            recorder,
            staged,
        }
    }
}

#[async_trait]
impl Subscriber for RecordingSubscriber {
    type Delivery = RecordingDelivery;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<RecordingDelivery>> {
        let d = self.inner.next(max_wait).await?;
        Ok(d.map(|inner| {
            let id = inner.message().stable_id();
            self.recorder.push(Event::Received {
                id,
                at: Instant::now(),
            });
            RecordingDelivery {
                inner,
                recorder: self.recorder.clone(),
                staged: self.staged,
            }
        }))
    }

    async fn close(&mut self) {
        self.inner.close().await;
    }
}

/// A delivery of a [`RecordingSubscriber`].
pub struct RecordingDelivery {
    inner: BoxDelivery,
    recorder: Arc<Recorder>,
    staged: bool,
}

impl RecordingDelivery {
    fn wrap(inner: BoxDelivery, recorder: Arc<Recorder>, staged: bool) -> Self {
        Self {
            inner,
            recorder,
            staged,
        }
    }
}

#[async_trait]
impl Delivery for RecordingDelivery {
    fn message(&self) -> &ReceivedMessage {
        self.inner.message()
    }

    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        let (rec, staged) = (self.recorder, self.staged);
        self.inner
            .ack()
            .await
            .map_err(|(e, d)| (e, Self::wrap(d, rec, staged)))
    }

    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        let id = self.inner.message().stable_id();
        let at = Instant::now();
        let (rec, staged) = (self.recorder, self.staged);
        match self.inner.retry(plan).await {
            Ok(()) => {
                rec.push(Event::Retried {
                    id,
                    at,
                    delay: if staged { plan.stage_delay } else { plan.delay },
                });
                Ok(())
            }
            Err((e, d)) => Err((e, Self::wrap(d, rec, staged))),
        }
    }

    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        let (rec, staged) = (self.recorder, self.staged);
        self.inner
            .park(record)
            .await
            .map_err(|(e, d)| (e, Self::wrap(d, rec, staged)))
    }
}
