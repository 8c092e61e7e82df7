//! The confirming publisher: confirm mode, `mandatory`, persistent messages whose
//! `message_id` is the postroom id. A publish succeeds only on a positive confirm with no
//! basic.return: RabbitMQ confirms an unroutable message too, after returning it, so the
//! return is what counts. A batch is sent through a sliding window of confirms in flight
//! (`BrokerOptions::confirm_window`): the next message goes out as soon as the oldest is
//! confirmed, and each message is matched to its own outcome. A channel is used by one caller
//! at a time, never concurrently (a basic.return rides on whichever confirm the client
//! resolves next, so one owner must collect every confirm of a channel's window); a publisher
//! may keep several channels (`BrokerOptions::publisher_channels`), so callers whose confirms
//! are outstanding at once each hold their own instead of taking turns. Each subscriber of a
//! transport settles through a publisher of its own, so a producer's large batch never holds
//! up a consumer's retries.
//!
//! Single messages ([`ConfirmingPublisher::send`], what a delivery's retry or park uses) do
//! not queue one confirm wait behind another: each joins a group, and one caller sends the
//! whole group through the window and hands every message its own result. Messages that
//! arrive while every channel waits for confirms go out together in the next group, so eight
//! handlers retrying at once cost about two confirm round trips, not eight.
//!
//! Order: one call's messages go out on one channel, in order; calls made one after the
//! other (each waiting for its confirms) arrive in that order. Calls running at once may
//! overtake each other, as they may on any connection.

use crate::error::{amqp, breaks_channel};
use crate::headers::to_field_table;
use lapin::types::AMQPValue;
use postroom_core::message::headers::AGGREGATE_KEY;
use crate::stats::{LinkStats, TRANSPORT};
use crate::{Broker, ConsumerNames, TopologyConfig};
use futures::FutureExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::publisher_confirm::{Confirmation, PublisherConfirm};
use lapin::{BasicProperties, Channel};
use postroom_core::metrics as m;
use postroom_core::{
    Error, ErrorKind, Headers, MessageId, OutgoingMessage, Publisher, Result, Route,
};
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// One message to one exchange and routing key.
#[derive(Clone, Copy, Debug)]
pub struct Outbound<'a> {
    /// Exchange (`""`: the default exchange).
    pub exchange: &'a str,
    /// Routing key.
    pub routing_key: &'a str,
    /// Stable id, sent as the `message_id` property.
    pub id: MessageId,
    /// Headers, sent as AMQP long strings.
    pub headers: &'a Headers,
    /// Body.
    pub body: &'a [u8],
}

/// A publisher that returns only after the broker confirmed, and treats a return as failure.
pub struct ConfirmingPublisher {
    broker: Arc<Broker>,
    confirm_timeout: std::time::Duration,
    window: usize,
    exchange: String,
    prefix: String,
    /// The channels, each held by the caller sending on it until its confirms are in.
    channels: Vec<tokio::sync::Mutex<Option<Channel>>>,
    /// One permit per channel: a holder finds a channel free.
    free: tokio::sync::Semaphore,
    /// Single messages waiting for the next group.
    waiting: std::sync::Mutex<Vec<Waiting>>,
    /// One permit per channel, held by a caller sending a group until its results are
    /// handed out.
    group_senders: tokio::sync::Semaphore,
    stats: Arc<LinkStats>,
}

/// A single message waiting for a group to carry it, and where its result goes.
struct Waiting {
    exchange: String,
    routing_key: String,
    id: MessageId,
    headers: Headers,
    body: Vec<u8>,
    result: oneshot::Sender<Result<()>>,
}

impl Waiting {
    fn outbound(&self) -> Outbound<'_> {
        Outbound {
            exchange: &self.exchange,
            routing_key: &self.routing_key,
            id: self.id,
            headers: &self.headers,
            body: &self.body,
        }
    }
}

postroom_core::debug_showing!(ConfirmingPublisher { exchange });

impl ConfirmingPublisher {
    /// A publisher on `broker` that sends topics to the work exchange of `config` and
    /// consumer routes (redrive) to that consumer's work queue.
    #[must_use]
    pub fn new(broker: Arc<Broker>, config: &TopologyConfig) -> Self {
        let stats = broker.stats();
        let channels = broker
            .options()
            .publisher_channels
            .clamp(1, MAX_PUBLISHER_CHANNELS);
        Self {
            confirm_timeout: broker.options().confirm_timeout,
            window: broker.options().confirm_window,
            broker,
            exchange: config.exchange.clone(),
            prefix: config.prefix.clone(),
            channels: (0..channels)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            free: tokio::sync::Semaphore::new(channels),
            waiting: std::sync::Mutex::new(Vec::new()),
            group_senders: tokio::sync::Semaphore::new(channels),
            stats,
        }
    }

    /// The link this publisher sends on.
    pub(crate) fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Where a route goes: a topic to the work exchange with the topic as routing key; a
    /// consumer (redrive) through its retry exchange with the key bound to its work queue
    /// only, so other consumers of the topic never see the redriven copy.
    #[must_use]
    pub fn address(&self, route: &Route) -> (String, String) {
        match route {
            Route::Topic(key) => (self.exchange.clone(), key.clone()),
            Route::Consumer(name) => {
                let n = ConsumerNames::new(&self.prefix, name);
                (n.retry_exchange.clone(), n.return_key().to_string())
            }
        }
    }

    /// Publish one message and wait for its confirm (and that it was not returned).
    ///
    /// The message joins the group waiting to be sent. The first caller to find a channel
    /// free sends the whole group through the window of confirms and hands each message
    /// its own result; the others wait for theirs. A caller dropped while it sends its group
    /// leaves the other messages of the group with an error (their callers keep the
    /// originals), never with a success that was not confirmed.
    pub async fn send(&self, item: Outbound<'_>) -> Result<()> {
        check_outbound(&item)?;
        let (result, mut mine) = oneshot::channel();
        self.waiting_list().push(Waiting {
            exchange: item.exchange.to_string(),
            routing_key: item.routing_key.to_string(),
            id: item.id,
            headers: item.headers.clone(),
            body: item.body.to_vec(),
            result,
        });
        let abandoned = |_| {
            Err(Error::new(
                ErrorKind::Io,
                format!(
                    "the group carrying {} was abandoned before its confirm",
                    item.id
                ),
            ))
        };
        loop {
            tokio::select! {
                biased;
                r = &mut mine => return r.unwrap_or_else(abandoned),
                turn = self.group_senders.acquire() => {
                    let group = std::mem::take(&mut *self.waiting_list());
                    if group.is_empty() {
                        self.stats.record_empty_group_turn();
                        // Another caller took this message into its group: the result is on
                        // the way. Waiting for it (not for another turn, which other free
                        // channels would grant at once, again and again) costs nothing.
                        drop(turn);
                        return mine.await.unwrap_or_else(abandoned);
                    }
                    let items: Vec<Outbound<'_>> = group.iter().map(Waiting::outbound).collect();
                    let results = self.send_checked(&items).await;
                    drop(items);
                    for (w, r) in group.into_iter().zip(results) {
                        let _ = w.result.send(r);
                    }
                    drop(turn);
                }
            }
        }
    }

    fn waiting_list(&self) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
        // A panic while the list was held cannot leave it half-changed (push and take only).
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn ensure_channel(&self, slot: &mut Option<Channel>) -> Result<Channel> {
        if let Some(ch) = slot.as_ref().filter(|c| c.status().connected()) {
            return Ok(ch.clone());
        }
        let ch = self.broker.channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| amqp("enabling publisher confirms", e))?;
        *slot = Some(ch.clone());
        Ok(ch)
    }

    /// Publish many through the sliding window of confirms; one result per message, in order.
    /// A message AMQP cannot carry (a name over 255 bytes) fails alone, before anything is sent.
    pub async fn send_batch(&self, items: &[Outbound<'_>]) -> Vec<Result<()>> {
        let mut results: Vec<Option<Result<()>>> = items
            .iter()
            .map(|it| check_outbound(it).err().map(Err))
            .collect();
        let valid: Vec<Outbound<'_>> = items
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|(it, _)| *it)
            .collect();
        let mut sent = if valid.is_empty() {
            Vec::new()
        } else {
            self.send_checked(&valid).await
        }
        .into_iter();
        for r in &mut results {
            if r.is_none() {
                *r = sent.next();
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::new(ErrorKind::Io, "no result"))))
            .collect()
    }

    /// Publish and wait for the confirms, at most the confirm timeout: a connection the
    /// broker blocked (memory or disk alarm) takes the channel lock, the channel and the
    /// confirms with it, and every message comes back with a `Timeout` error, so a retry or a
    /// park hands its delivery back instead of hanging with the lock held.
    async fn send_checked(&self, items: &[Outbound<'_>]) -> Vec<Result<()>> {
        // Waiting for a free channel counts against the timeout too: under an alarm every
        // channel is stuck on its confirms.
        let mut held = None;
        let sending = async {
            let slot = held.insert(self.free_channel().await);
            self.send_confirmed(&mut slot.1, items).await
        };
        let closed = |id: MessageId| {
            Err(Error::new(
                ErrorKind::Closed,
                format!("the broker link was closed (shutdown) before {id} was confirmed"),
            ))
        };
        let confirmed = tokio::select! {
            r = tokio::time::timeout(self.confirm_timeout, sending) => r,
            // A clean close of the link: what is unconfirmed now is handed back at once (the
            // caller keeps the message), not after the confirm timeout.
            () = self.broker.until_closing() => {
                return items.iter().map(|it| closed(it.id)).collect();
            }
        };
        match confirmed {
            // The link failing under a message because it is being closed is the close, not a
            // broken link: the caller keeps the message either way, and says so quietly.
            Ok(results) if self.broker.is_closing() => results
                .into_iter()
                .zip(items)
                .map(|(r, it)| match r {
                    Err(e) if matches!(e.kind(), ErrorKind::Connection | ErrorKind::Io) => {
                        closed(it.id)
                    }
                    r => r,
                })
                .collect(),
            Ok(results) => results,
            Err(_) => {
                metrics::counter!(m::CONFIRM_TIMEOUTS, "transport" => TRANSPORT).increment(1);
                // The channel may still owe confirms: never reuse it.
                if let Some(ch) = held.and_then(|(_, mut slot)| slot.take()) {
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(
                            std::time::Duration::from_secs(5),
                            ch.close(200, "postroom: confirm timed out"),
                        )
                        .await;
                    });
                }
                tracing::warn!(
                    timeout_ms = self.confirm_timeout.as_millis() as u64,
                    messages = items.len(),
                    "no publisher confirm in time (is the broker blocking publishers under an alarm?)"
                );
                items
                    .iter()
                    .map(|it| {
                        Err(Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "no confirm for {} to {:?} / {:?} within {:?}",
                                it.id, it.exchange, it.routing_key, self.confirm_timeout
                            ),
                        ))
                    })
                    .collect()
            }
        }
    }

    /// A channel no other caller is sending on, the lowest free one (the others are opened
    /// only when callers overlap).
    async fn free_channel(&self) -> ChannelSlot<'_> {
        let permit = self
            .free
            .acquire()
            .await
            .expect("the publisher never closes its semaphore");
        // A permit holder always finds one unlocked: channels are locked only under a permit.
        for slot in &self.channels {
            if let Ok(guard) = slot.try_lock() {
                return (permit, guard);
            }
        }
        (permit, self.channels[0].lock().await)
    }

    async fn send_confirmed(
        &self,
        slot: &mut Option<Channel>,
        items: &[Outbound<'_>],
    ) -> Vec<Result<()>> {
        let ch = match self.ensure_channel(slot).await {
            Ok(ch) => ch,
            Err(e) => {
                return items
                    .iter()
                    .map(|_| Err(Error::new(e.kind(), e.to_string())))
                    .collect();
            }
        };
        let started = Instant::now();
        let window = self.window.max(1);
        let mut results: Vec<Option<Result<()>>> = (0..items.len()).map(|_| None).collect();
        let mut returned: HashMap<String, String> = HashMap::new();
        let mut queue: VecDeque<InFlight> = VecDeque::with_capacity(window.min(items.len()));
        let mut next = 0;
        let mut filled_once = false;
        let mut broken = false;
        // A sliding window: publish until `window` are unconfirmed, then send the next one
        // each time the oldest is confirmed.
        loop {
            while next < items.len() && queue.len() < window {
                if filled_once && queue.len() + 1 == window {
                    self.stats.record_window_slide();
                }
                queue.push_back(self.publish_one(&ch, next, &items[next]).await);
                self.stats.record_in_flight(queue.len());
                next += 1;
            }
            filled_once |= queue.len() >= window;
            let Some(front) = queue.front_mut() else {
                break;
            };
            if front.outcome.is_none() {
                let outcome = front.wait().await;
                front.set(outcome, &mut returned);
            }
            // A basic.return rides on whichever confirm lapin resolves next, not necessarily
            // its own message's, and that confirm is resolved no later than the message's
            // own: collect every confirm resolved by now, so that no message is taken as
            // confirmed while its return sits on a later one.
            for later in queue.iter_mut().skip(1) {
                later.poll_now(&mut returned);
            }
            let done = queue.pop_front().expect("front present");
            let result = self.result_of(&items[done.index], done.outcome, &returned);
            broken |= matches!(&result, Err(e) if breaks_channel(e.kind()));
            results[done.index] = Some(result);
        }
        metrics::histogram!(m::CONFIRM_SECONDS, "transport" => TRANSPORT)
            .record(started.elapsed().as_secs_f64());
        if broken {
            *slot = None;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::new(ErrorKind::Io, "no result"))))
            .collect()
    }

    async fn publish_one(&self, ch: &Channel, index: usize, it: &Outbound<'_>) -> InFlight {
        let mut headers = to_field_table(it.headers);
        // A message without an aggregate is its own key. The partitioned exchange hashes on
        // this header: without it, every such message would land in the same partition.
        if !it.headers.contains_key(AGGREGATE_KEY) {
            headers.insert(
                AGGREGATE_KEY.into(),
                AMQPValue::LongString(it.id.to_string().into_bytes().into()),
            );
        }
        let props = BasicProperties::default()
            .with_message_id(it.id.to_string().into())
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_headers(headers);
        let opts = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        match ch
            .basic_publish(it.exchange, it.routing_key, opts, it.body, props)
            .await
        {
            Ok(confirm) => InFlight {
                index,
                confirm: Some(Box::pin(confirm)),
                outcome: None,
            },
            Err(e) => InFlight {
                index,
                confirm: None,
                outcome: Some(Err(e)),
            },
        }
    }

    fn result_of(
        &self,
        it: &Outbound<'_>,
        outcome: Option<std::result::Result<Confirmation, lapin::Error>>,
        returned: &HashMap<String, String>,
    ) -> Result<()> {
        let id = it.id.to_string();
        let returned_as = returned.get(&id);
        match outcome {
            None => Err(Error::new(ErrorKind::Io, "no confirm outcome")),
            Some(Err(e)) => Err(amqp(
                format!(
                    "publishing {id} to {:?} / {:?}",
                    it.exchange, it.routing_key
                ),
                e,
            )),
            Some(Ok(Confirmation::Nack(_))) => {
                self.stats.record_nack();
                Err(Error::new(
                    ErrorKind::Nacked,
                    format!(
                        "broker nacked {id} to {:?} / {:?}",
                        it.exchange, it.routing_key
                    ),
                ))
            }
            Some(Ok(Confirmation::Ack(_))) if returned_as.is_some() => {
                self.stats.record_unroutable();
                Err(Error::new(
                    ErrorKind::Unroutable,
                    format!(
                        "{id} returned by the broker ({}): no queue bound to {:?} with key {:?}",
                        returned_as.map_or("", String::as_str),
                        it.exchange,
                        it.routing_key
                    ),
                ))
            }
            Some(Ok(Confirmation::Ack(_))) => Ok(()),
            Some(Ok(Confirmation::NotRequested)) => Err(Error::new(
                ErrorKind::Config,
                "the channel is not in confirm mode",
            )),
        }
    }
}

/// The most channels a publisher opens, whatever `BrokerOptions::publisher_channels` asks.
pub const MAX_PUBLISHER_CHANNELS: usize = 64;

/// A free channel and the permit that found it.
type ChannelSlot<'a> = (
    tokio::sync::SemaphorePermit<'a>,
    tokio::sync::MutexGuard<'a, Option<Channel>>,
);

/// One publish waiting for its confirm.
struct InFlight {
    index: usize,
    confirm: Option<Pin<Box<PublisherConfirm>>>,
    outcome: Option<std::result::Result<Confirmation, lapin::Error>>,
}

impl InFlight {
    async fn wait(&mut self) -> std::result::Result<Confirmation, lapin::Error> {
        match self.confirm.take() {
            Some(confirm) => confirm.await,
            None => Err(lapin::Error::InvalidChannelState(
                lapin::ChannelState::Error,
            )),
        }
    }

    /// Take the outcome if the broker has confirmed already (never waits).
    fn poll_now(&mut self, returned: &mut HashMap<String, String>) {
        if self.outcome.is_some() {
            return;
        }
        if let Some(confirm) = self.confirm.as_mut()
            && let Some(outcome) = confirm.as_mut().now_or_never()
        {
            self.confirm = None;
            self.set(outcome, returned);
        }
    }

    fn set(
        &mut self,
        outcome: std::result::Result<Confirmation, lapin::Error>,
        returned: &mut HashMap<String, String>,
    ) {
        if let Ok(Confirmation::Ack(Some(r)) | Confirmation::Nack(Some(r))) = &outcome {
            let id = r
                .delivery
                .properties
                .message_id()
                .as_ref()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default();
            returned.insert(id, format!("{} {}", r.reply_code, r.reply_text));
        }
        self.outcome = Some(outcome);
    }
}

/// The longest AMQP short string: exchange names, routing keys and header names.
pub const MAX_SHORT_STRING: usize = 255;

/// RabbitMQ's default `max_message_size`: the largest body the broker takes.
pub const MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

/// Refuse a message the broker would refuse by closing the channel under every other message
/// in flight on it: a body over [`MAX_MESSAGE_BYTES`] (it can never be sent as it is), or an
/// exchange, routing key or header name that does not fit an AMQP short string (sent anyway,
/// it would be cut or break the connection).
fn check_outbound(it: &Outbound<'_>) -> Result<()> {
    if it.body.len() > MAX_MESSAGE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!(
                "message {} is {} bytes; RabbitMQ takes at most {MAX_MESSAGE_BYTES} (its default max_message_size)",
                it.id,
                it.body.len()
            ),
        ));
    }
    let too_long = |what: &str, value: &str| {
        Error::new(
            ErrorKind::InvalidData,
            format!(
                "{what} of message {} is {} bytes; AMQP allows at most {MAX_SHORT_STRING}: {}",
                it.id,
                value.len(),
                postroom_core::message::truncate(value, 40)
            ),
        )
    };
    if it.exchange.len() > MAX_SHORT_STRING {
        return Err(too_long("the exchange name", it.exchange));
    }
    if it.routing_key.len() > MAX_SHORT_STRING {
        return Err(too_long("the routing key", it.routing_key));
    }
    match it.headers.keys().find(|k| k.len() > MAX_SHORT_STRING) {
        Some(k) => Err(too_long("a header name", k)),
        None => Ok(()),
    }
}

#[async_trait::async_trait]
impl Publisher for ConfirmingPublisher {
    async fn publish(&self, message: &OutgoingMessage) -> Result<()> {
        let (exchange, key) = self.address(&message.route);
        self.send(Outbound {
            exchange: &exchange,
            routing_key: &key,
            id: message.id,
            headers: &message.headers,
            body: &message.body,
        })
        .await
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        let addresses: Vec<(String, String)> =
            messages.iter().map(|m| self.address(&m.route)).collect();
        let items: Vec<Outbound<'_>> = messages
            .iter()
            .zip(&addresses)
            .map(|(m, (e, k))| Outbound {
                exchange: e,
                routing_key: k,
                id: m.id,
                headers: &m.headers,
                body: &m.body,
            })
            .collect();
        self.send_batch(&items).await
    }
}
