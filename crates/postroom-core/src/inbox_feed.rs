//! An inbox fed by brokers: persist, then ack.
//!
//! A feed takes one subscriber's deliveries and stores each into an inbox table
//! ([`InboxFeed::store`], deduplicated by message id), and acknowledges it only after the
//! insert committed. Several feeds may write into the same table at once — a NATS consumer
//! and a Kafka consumer while a system moves from one broker to the other — and the table
//! keeps one row per message id whichever feed brought it first; the other copy counts as a
//! duplicate absorbed. The workers behind the table (leases, retries, ordering by sequence
//! with gap detection) do not know which feed a row came from.

use crate::error::Result;
use crate::metrics as m;
use crate::transport::{Delivery, ReceivedMessage, Subscriber};
use async_trait::async_trait;
use std::time::Duration;
use tokio::sync::watch;

/// An inbox table that deliveries are stored into.
#[async_trait]
pub trait InboxFeed: Send + Sync {
    /// The consumer whose inbox this is.
    fn consumer(&self) -> &str;

    /// Store `msg`: `true` when it is new, `false` when its id is already there.
    async fn store(&self, msg: &ReceivedMessage) -> Result<bool>;
}

/// What a feed did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedCounts {
    /// Deliveries stored as new.
    pub stored: u64,
    /// Deliveries whose id was already stored (acked without a second row).
    pub duplicates: u64,
}

/// Store-then-ack `subscriber`'s deliveries into `inbox` until `shutdown` turns true;
/// `feed` names this feed in metrics (`postroom_inbox_feed_stored_total` and
/// `postroom_inbox_feed_duplicates_total`, labels `consumer` and `feed`). A failed store
/// leaves the delivery unacked (the transport delivers it again); a failed ack is tried
/// three times, then left to the transport's redelivery, whose copy is a duplicate.
pub async fn run_feed<S: Subscriber>(
    inbox: &dyn InboxFeed,
    feed: &str,
    mut subscriber: S,
    pause: Duration,
    shutdown: watch::Receiver<bool>,
) -> FeedCounts {
    let mut counts = FeedCounts::default();
    let consumer = inbox.consumer().to_string();
    // A dropped sender counts as a shutdown. The receive is never cancelled halfway (it may
    // hold a fetch); it returns within its short wait.
    while !*shutdown.borrow() && shutdown.has_changed().is_ok() {
        let delivery = match subscriber.next(pause.max(Duration::from_millis(100))).await {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(feed, error = %e, "inbox feed: receive failed");
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        match inbox.store(delivery.message()).await {
            Ok(true) => {
                counts.stored += 1;
                metrics::counter!(m::INBOX_FEED_STORED, "consumer" => consumer.clone(), "feed" => feed.to_string())
                    .increment(1);
            }
            Ok(false) => {
                counts.duplicates += 1;
                metrics::counter!(m::INBOX_FEED_DUPLICATES, "consumer" => consumer.clone(), "feed" => feed.to_string())
                    .increment(1);
            }
            Err(e) => {
                tracing::warn!(feed, error = %e, "inbox feed: store failed; leaving the delivery unacked");
                tokio::time::sleep(pause).await;
                continue;
            }
        }
        let mut d = delivery;
        for try_no in 0..3u32 {
            match d.ack().await {
                Ok(()) => break,
                Err((e, back)) => {
                    tracing::warn!(feed, error = %e, try_no, "inbox feed: ack failed; the copy will be deduplicated");
                    d = back;
                }
            }
        }
    }
    subscriber.close().await;
    counts
}
