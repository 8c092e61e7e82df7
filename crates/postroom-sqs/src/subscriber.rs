//! The subscriber: `ReceiveMessage` on one queue into a small buffer of received messages, each
//! with its lease (see [`crate::lease`]). `next(max_wait)` returns within `max_wait`: it long
//! polls for the whole seconds that fit (`WaitTimeSeconds` up to SQS's 20), short polls below
//! a second and then waits out the rest, so an idle consumer sends at most one receive per
//! `max_wait`; the call has an attempt timeout of its own.
//!
//! A standard queue is read up to `min(prefetch, 10)` messages per receive. A FIFO queue is
//! read one message per receive: SQS may return several messages of one group in one receive,
//! and when the first of them is retried (hidden for its delay) the others would have to be
//! released to let it come first — and every receive of them counts toward their attempts. One
//! per receive, SQS itself holds back the rest of the group while one of it is unsettled.

use crate::attempt;
use crate::dead_letter;
use crate::deleter::Deleter;
use crate::delivery::SqsDelivery;
use crate::error::sdk;
use crate::lease::Lease;
use crate::stats::SqsStats;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, Message, MessageSystemAttributeName,
};
use postroom_core::parking::LastErrorLog;
use postroom_core::{Error, ErrorKind, ReceivedMessage, Result, Subscriber};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a dead-letter subscriber knows of the queue its messages came from.
#[derive(Clone, Debug)]
pub(crate) struct DeadLetterSource {
    /// The source (work) queue's name.
    pub(crate) queue_name: String,
    /// Its `maxReceiveCount`.
    pub(crate) max_receive_count: u32,
}

/// What a subscriber and its deliveries share.
pub(crate) struct QueueContext {
    pub(crate) client: Client,
    /// The consumer the queue belongs to.
    pub(crate) consumer: String,
    pub(crate) queue_name: String,
    pub(crate) queue_url: String,
    /// Where a parked copy goes.
    pub(crate) dlq_url: String,
    pub(crate) fifo: bool,
    /// The visibility timeout a receive sets and the heartbeat renews (whole seconds).
    pub(crate) visibility: Duration,
    /// Renew it while a handler runs.
    pub(crate) extend: bool,
    pub(crate) deleter: Deleter,
    pub(crate) last_errors: Arc<dyn LastErrorLog>,
    pub(crate) stats: Arc<SqsStats>,
    /// Set when the queue is a DLQ read by the parking ingest.
    pub(crate) dead_letters: Option<DeadLetterSource>,
}

postroom_core::debug_showing!(QueueContext { queue: queue_name });

/// How long past its long-poll wait a receive may take before it is given up.
pub const RECEIVE_MARGIN: Duration = Duration::from_secs(10);

/// A [`Subscriber`] on one SQS queue.
#[derive(Debug)]
pub struct SqsSubscriber {
    ctx: Arc<QueueContext>,
    prefetch: usize,
    buffer: VecDeque<SqsDelivery>,
}

impl SqsSubscriber {
    pub(crate) fn new(ctx: QueueContext, prefetch: usize) -> Self {
        Self {
            ctx: Arc::new(ctx),
            prefetch: prefetch.max(1),
            buffer: VecDeque::new(),
        }
    }

    /// The queue read.
    #[must_use]
    pub fn queue(&self) -> &str {
        &self.ctx.queue_name
    }

    async fn delivery(&self, m: &Message, received_at: Instant) -> SqsDelivery {
        let ctx = &self.ctx;
        let system = m.attributes();
        let receive_count: u32 = system
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let decoded = crate::codec::decode(m.body().unwrap_or(""), m.message_attributes());
        let route = decoded.route.clone();
        let mut message = ReceivedMessage::new(
            decoded.id,
            decoded.route.unwrap_or_else(|| ctx.queue_name.clone()),
            decoded.headers,
            decoded.body,
        );
        let id = message.stable_id();
        match &ctx.dead_letters {
            Some(source) => {
                let last = attempt::lookup(ctx.last_errors.as_ref(), &ctx.consumer, id).await;
                let from_arn = system
                    .and_then(|a| a.get(&MessageSystemAttributeName::DeadLetterQueueSourceArn))
                    .map(String::as_str);
                dead_letter::describe(
                    &mut message.headers,
                    source,
                    route.as_deref(),
                    from_arn,
                    last.as_ref(),
                );
            }
            None => {
                let last = if receive_count > 1 {
                    attempt::lookup(ctx.last_errors.as_ref(), &ctx.consumer, id).await
                } else {
                    None
                };
                attempt::annotate(&mut message.headers, receive_count, last.as_ref());
            }
        }
        let message = message
            .redelivered(receive_count > 1)
            .deliveries(receive_count.max(1));
        let receipt = m.receipt_handle().unwrap_or_default().to_string();
        SqsDelivery {
            lease: Lease::start(ctx, receipt, received_at),
            message,
            ctx: ctx.clone(),
        }
    }

    async fn receive(&mut self, max_wait: Duration) -> Result<()> {
        let wait = max_wait
            .saturating_sub(Duration::from_millis(250))
            .as_secs()
            .min(20);
        let max = if self.ctx.fifo {
            1
        } else {
            self.prefetch.min(10)
        };
        let call = self
            .ctx
            .client
            .receive_message()
            .queue_url(&self.ctx.queue_url)
            .max_number_of_messages(max as i32)
            .wait_time_seconds(wait as i32)
            .visibility_timeout(self.ctx.visibility.as_secs() as i32)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send();
        // A receive abandoned on our side may still have been answered: its messages are
        // then hidden for the visibility timeout and their receive counted (a step up the
        // ladder) with no handler having seen them. So a slow endpoint gets time to answer.
        let limit = max_wait.max(Duration::from_secs(wait) + RECEIVE_MARGIN);
        let sent = Instant::now();
        let out = match tokio::time::timeout(limit, call).await {
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "ReceiveMessage on {} took over {limit:?}",
                        self.ctx.queue_name
                    ),
                ));
            }
            Ok(Err(e)) => return Err(sdk(format!("ReceiveMessage on {}", self.ctx.queue_name), e)),
            Ok(Ok(out)) => out,
        };
        for m in out.messages() {
            let d = self.delivery(m, sent).await;
            self.buffer.push_back(d);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Subscriber for SqsSubscriber {
    type Delivery = SqsDelivery;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<SqsDelivery>> {
        if let Some(d) = self.buffer.pop_front() {
            return Ok(Some(d));
        }
        let started = Instant::now();
        self.receive(max_wait).await?;
        if let Some(d) = self.buffer.pop_front() {
            return Ok(Some(d));
        }
        // Nothing arrived: wait out the rest, so an idle consumer polls once per max_wait.
        tokio::time::sleep(max_wait.saturating_sub(started.elapsed())).await;
        Ok(None)
    }

    /// Release the messages received but not handed out (visible again at once; SQS has
    /// counted their receive).
    async fn close(&mut self) {
        let held: Vec<SqsDelivery> = self.buffer.drain(..).collect();
        if held.is_empty() {
            return;
        }
        let mut guards = Vec::new();
        for d in &held {
            guards.push(d.lease.hold(&self.ctx).await);
        }
        for (n, chunk) in held.chunks(10).enumerate() {
            let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(format!("r{n}-{i}"))
                        .receipt_handle(&d.lease.receipt)
                        .visibility_timeout(0)
                        .build()
                        .expect("id and receipt are set")
                })
                .collect();
            let r = self
                .ctx
                .client
                .change_message_visibility_batch()
                .queue_url(&self.ctx.queue_url)
                .set_entries(Some(entries))
                .send()
                .await;
            match r {
                Ok(_) => self.ctx.stats.record_released(chunk.len() as u64),
                Err(e) => {
                    tracing::debug!(error = %sdk("releasing received messages", e), "they come back after their visibility timeout")
                }
            }
        }
        for g in guards {
            g.settle();
        }
    }
}
