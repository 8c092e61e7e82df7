//! A subscriber wrapper that watches what the broker delivers: it counts deliveries and
//! settled deliveries (acknowledged, retried or parked) and, for retry copies, how long they
//! spent in the delay stage compared with its delay.

use super::handler::Progress;
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
    settled: Progress,
    scheduled: Mutex<HashMap<MessageId, (Instant, Instant, Duration)>>,
    arrivals: Mutex<Vec<Arrival>>,
}

impl Book {
    /// Deliveries received so far.
    #[must_use]
    pub fn deliveries(&self) -> u64 {
        self.deliveries.load(Ordering::SeqCst)
    }

    /// Deliveries settled so far: acknowledged, retried or parked (a settle that failed handed
    /// its delivery back and does not count).
    #[must_use]
    pub fn settled(&self) -> &Progress {
        &self.settled
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

    async fn close(&mut self) {
        self.inner.close().await;
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
        Self::settled(self.book, self.inner.ack().await)
    }

    async fn ack_all(batch: Vec<Self>) -> Vec<std::result::Result<(), Handback<Self>>> {
        // The transport's own batch ack (one AMQP `multiple` ack where it can), then counted.
        let (inner, books): (Vec<D>, Vec<Arc<Book>>) =
            batch.into_iter().map(|d| (d.inner, d.book)).unzip();
        D::ack_all(inner)
            .await
            .into_iter()
            .zip(books)
            .map(|(r, book)| Self::settled(book, r))
            .collect()
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
        let r = self.inner.retry(plan).await;
        if let Some(id) = id {
            let mut scheduled = book.scheduled.lock().expect("book");
            match &r {
                Ok(()) => {
                    if let Some(entry) = scheduled.get_mut(&id) {
                        entry.1 = Instant::now();
                    }
                }
                Err(_) => {
                    scheduled.remove(&id);
                }
            }
        }
        Self::settled(book, r)
    }

    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        Self::settled(self.book, self.inner.park(record).await)
    }
}

impl<D> TimedDelivery<D> {
    /// Count a settle that succeeded; hand a failed one back wrapped again.
    fn settled(
        book: Arc<Book>,
        r: std::result::Result<(), Handback<D>>,
    ) -> std::result::Result<(), Handback<Self>> {
        match r {
            Ok(()) => {
                book.settled.tick();
                Ok(())
            }
            Err((e, inner)) => Err((e, Self { inner, book })),
        }
    }
}
