//! Type-erased subscribers and deliveries, for programs that pick a transport at run time
//! (the CLI). [`BoxSubscriber::new`] wraps any [`Subscriber`]; its deliveries keep the
//! hand-back contract: a failed act returns the boxed delivery.

use crate::error::Result;
use crate::outcome::RetryPlan;
use crate::parking::ParkedMessage;
use crate::transport::{Delivery, Handback, ReceivedMessage, Subscriber};
use async_trait::async_trait;
use std::any::Any;
use std::time::Duration;

#[async_trait]
trait DynDelivery: Send {
    fn message(&self) -> &ReceivedMessage;
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    async fn ack(self: Box<Self>) -> std::result::Result<(), Handback<BoxDelivery>>;
    /// Acknowledge this delivery and `rest` with [`Delivery::ack_all`] of the concrete type
    /// (all of them are of this delivery's type; otherwise each is acknowledged on its own).
    async fn ack_all(
        self: Box<Self>,
        rest: Vec<BoxDelivery>,
    ) -> Vec<std::result::Result<(), Handback<BoxDelivery>>>;
    async fn retry(
        self: Box<Self>,
        plan: &RetryPlan,
    ) -> std::result::Result<(), Handback<BoxDelivery>>;
    async fn park(
        self: Box<Self>,
        record: &ParkedMessage,
    ) -> std::result::Result<(), Handback<BoxDelivery>>;
}

#[async_trait]
impl<D: Delivery> DynDelivery for D {
    fn message(&self) -> &ReceivedMessage {
        Delivery::message(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    async fn ack(self: Box<Self>) -> std::result::Result<(), Handback<BoxDelivery>> {
        Delivery::ack(*self)
            .await
            .map_err(|(e, d)| (e, BoxDelivery::new(d)))
    }
    async fn ack_all(
        self: Box<Self>,
        rest: Vec<BoxDelivery>,
    ) -> Vec<std::result::Result<(), Handback<BoxDelivery>>> {
        if !rest.iter().all(|b| b.0.as_any().is::<D>()) {
            let mine = std::iter::once(BoxDelivery(self));
            let all = mine.chain(rest).map(Delivery::ack);
            return futures::future::join_all(all).await;
        }
        // Every one is a `D` (checked just above), so each downcast succeeds and no delivery
        // goes without its result.
        let mut all: Vec<D> = Vec::with_capacity(rest.len() + 1);
        all.push(*self);
        for b in rest {
            let d = b.0.into_any().downcast::<D>();
            all.push(*d.expect("checked to be of this delivery's type"));
        }
        D::ack_all(all)
            .await
            .into_iter()
            .map(|r| r.map_err(|(e, d)| (e, BoxDelivery::new(d))))
            .collect()
    }
    async fn retry(
        self: Box<Self>,
        plan: &RetryPlan,
    ) -> std::result::Result<(), Handback<BoxDelivery>> {
        Delivery::retry(*self, plan)
            .await
            .map_err(|(e, d)| (e, BoxDelivery::new(d)))
    }
    async fn park(
        self: Box<Self>,
        record: &ParkedMessage,
    ) -> std::result::Result<(), Handback<BoxDelivery>> {
        Delivery::park(*self, record)
            .await
            .map_err(|(e, d)| (e, BoxDelivery::new(d)))
    }
}

/// A delivery of any transport.
pub struct BoxDelivery(Box<dyn DynDelivery>);

impl BoxDelivery {
    /// Erase the type of `d`.
    pub fn new<D: Delivery>(d: D) -> Self {
        Self(Box::new(d))
    }
}

#[async_trait]
impl Delivery for BoxDelivery {
    fn message(&self) -> &ReceivedMessage {
        self.0.message()
    }
    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        self.0.ack().await
    }
    async fn ack_all(batch: Vec<Self>) -> Vec<std::result::Result<(), Handback<Self>>> {
        let mut batch = batch.into_iter();
        match batch.next() {
            Some(first) => first.0.ack_all(batch.collect()).await,
            None => Vec::new(),
        }
    }
    async fn retry(self, plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        self.0.retry(plan).await
    }
    async fn park(self, record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        self.0.park(record).await
    }
}

#[async_trait]
trait DynSubscriber: Send {
    async fn next(&mut self, max_wait: Duration) -> Result<Option<BoxDelivery>>;
    async fn close(&mut self);
}

#[async_trait]
impl<S: Subscriber> DynSubscriber for S {
    async fn next(&mut self, max_wait: Duration) -> Result<Option<BoxDelivery>> {
        Ok(Subscriber::next(self, max_wait)
            .await?
            .map(BoxDelivery::new))
    }
    async fn close(&mut self) {
        Subscriber::close(self).await;
    }
}

/// A subscriber of any transport.
pub struct BoxSubscriber(Box<dyn DynSubscriber>);

impl BoxSubscriber {
    /// Erase the type of `s`.
    pub fn new<S: Subscriber>(s: S) -> Self {
        Self(Box::new(s))
    }
}

#[async_trait]
impl Subscriber for BoxSubscriber {
    type Delivery = BoxDelivery;
    async fn next(&mut self, max_wait: Duration) -> Result<Option<BoxDelivery>> {
        self.0.next(max_wait).await
    }
    async fn close(&mut self) {
        self.0.close().await;
    }
}
