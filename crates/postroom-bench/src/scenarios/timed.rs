//! A subscriber wrapper that watches what the broker delivers: it counts deliveries and, for
//! retry copies, how long they spent in the delay stage compared with its delay.

use postroom_core::transport::Handback;
use postroom_core::{
    Delivery, MessageId, ParkedMessage, ReceivedMessage, Result, RetryPlan, Subscriber, async_trait,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One retry copy as seen on arrival.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    /// The stage delay (the retry queue's TTL).
    pub stage_delay: Duration,
    /// Arrival minus the moment the retry publish started, minus the delay. The copy reached
    /// the broker after that moment, so this is an upper bound of its lateness, and a negative
    /// value proves it came early.
    pub late_upper: f64,
    /// Arrival minus the moment the retry publish was confirmed, minus the delay: a lower
    /// bound; negative means it may have come early.
    pub late_lower: f64,
}

/// What the wrapper recorded.
#[derive(Debug, Default)]
pub struct Book {
    deliveries: AtomicU64,
    scheduled: Mutex<HashMap<MessageId, (Instant, Instant, Duration)>>,
    arrivals: Mutex<Vec<Arrival>>,
}

impl Book {
    /// Deliveries received so far.
    #[must_use]
    pub fn deliveries(&self) -> u64 {
        self.deliveries.load(Ordering::SeqCst)
    }

    /// Retry copies received so far.
    #[must_use]
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().expect("book").clone()
    }

    fn arrived(&self, msg: &ReceivedMessage) {
        self.deliveries.fetch_add(1, Ordering::SeqCst);
        let now = Instant::now();
        let Some(id) = msg.id else { return };
        if msg.attempt() == 0 {
            return;
        }
        if let Some((before, confirmed, delay)) = self.scheduled.lock().expect("book").remove(&id) {
            let ms = |since: Instant| {
                now.duration_since(since).as_secs_f64() * 1000.0 - delay.as_secs_f64() * 1000.0
            };
            self.arrivals.lock().expect("book").push(Arrival {
                stage_delay: delay,
                late_upper: ms(before),
                late_lower: ms(confirmed),
            });
        }
    }
}

/// A subscriber that records into a [`Book`].
#[derive(Debug)]
pub struct TimedSubscriber<S> {
    inner: S,
    book: Arc<Book>,
}

impl<S> TimedSubscriber<S> {
    /// Wrap `inner`.
    pub fn new(inner: S, book: Arc<Book>) -> Self {
        Self { inner, book }
    }
}

#[async_trait]
impl<S: Subscriber> Subscriber for TimedSubscriber<S> {
    type Delivery = TimedDelivery<S::Delivery>;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<Self::Delivery>> {
        let d = self.inner.next(max_wait).await?;
        Ok(d.map(|inner| {
            self.book.arrived(inner.message());
            TimedDelivery {
                inner,
                book: self.book.clone(),
            }
        }))
    }
}

/// A delivery that records when its retry copy was scheduled.
#[derive(Debug)]
pub struct TimedDelivery<D> {
    inner: D,
    book: Arc<Book>,
}

#[async_trait]
impl<D: Delivery> Delivery for TimedDelivery<D> {
    fn message(&self) -> &ReceivedMessage {
        self.inner.message()
    }

    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        let book = self.book.clone();
        self.inner
            .ack()
            .await
            .map_err(|h| Self { inner: h.1, book }.back_with(h.0))
    }

    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        let book = self.book.clone();
        let id = self.inner.message().id;
        let before = Instant::now();
        // Recorded before the publish: the copy can arrive before `retry` returns.
        if let Some(id) = id {
            book.scheduled
                .lock()
                .expect("book")
                .insert(id, (before, before, plan.stage_delay));
        }
        match self.inner.retry(plan).await {
            Ok(()) => {
                if let Some(id) = id
                    && let Some(entry) = book.scheduled.lock().expect("book").get_mut(&id)
                {
                    entry.1 = Instant::now();
                }
                Ok(())
            }
            Err((e, inner)) => {
                if let Some(id) = id {
                    book.scheduled.lock().expect("book").remove(&id);
                }
                Err(Self { inner, book }.back_with(e))
            }
        }
    }

    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        let book = self.book.clone();
        self.inner
            .park(record)
            .await
            .map_err(|h| Self { inner: h.1, book }.back_with(h.0))
    }
}

impl<D> TimedDelivery<D> {
    fn back_with(self, e: postroom_core::Error) -> Handback<Self> {
        (e, self)
    }
}
