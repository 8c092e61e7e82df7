//! The confirming publisher (R3, R9): confirm mode, `mandatory`, persistent messages whose
//! `message_id` is the postroom id. A publish succeeds only on a positive confirm with no
//! basic.return: RabbitMQ confirms an unroutable message too, after returning it, so the
//! return is what counts. Batches are pipelined on one channel, each message matched to its
//! own outcome. The channel is used under a lock, never concurrently.

use crate::error::{amqp, breaks_channel};
use crate::headers::to_field_table;
use crate::stats::{LinkStats, TRANSPORT};
use crate::{Broker, ConsumerNames, TopologyConfig};
use futures::future::join_all;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::{BasicProperties, Channel};
use postroom_core::metrics as m;
use postroom_core::{
    Error, ErrorKind, Headers, MessageId, OutgoingMessage, Publisher, Result, Route,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

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
    exchange: String,
    prefix: String,
    channel: tokio::sync::Mutex<Option<Channel>>,
    stats: Arc<LinkStats>,
}

impl std::fmt::Debug for ConfirmingPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmingPublisher")
            .field("exchange", &self.exchange)
            .finish_non_exhaustive()
    }
}

impl ConfirmingPublisher {
    /// A publisher on `broker` that sends topics to the work exchange of `config` and
    /// consumer routes (redrive) to that consumer's work queue.
    #[must_use]
    pub fn new(broker: Arc<Broker>, config: &TopologyConfig) -> Self {
        let stats = broker.stats();
        Self {
            broker,
            exchange: config.exchange.clone(),
            prefix: config.prefix.clone(),
            channel: tokio::sync::Mutex::new(None),
            stats,
        }
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

    /// Publish one message and wait for its confirm.
    pub async fn send(&self, item: Outbound<'_>) -> Result<()> {
        self.send_batch(&[item])
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Io, "no result")))
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

    /// Publish many with all of them in flight at once; one result per message, in order.
    pub async fn send_batch(&self, items: &[Outbound<'_>]) -> Vec<Result<()>> {
        let mut slot = self.channel.lock().await;
        let ch = match self.ensure_channel(&mut slot).await {
            Ok(ch) => ch,
            Err(e) => {
                return items
                    .iter()
                    .map(|_| Err(Error::new(e.kind(), e.to_string())))
                    .collect();
            }
        };
        let started = Instant::now();
        let mut in_flight = Vec::with_capacity(items.len());
        for it in items {
            let props = BasicProperties::default()
                .with_message_id(it.id.to_string().into())
                .with_delivery_mode(2)
                .with_content_type("application/json".into())
                .with_headers(to_field_table(it.headers));
            let opts = BasicPublishOptions {
                mandatory: true,
                immediate: false,
            };
            in_flight.push(
                ch.basic_publish(it.exchange, it.routing_key, opts, it.body, props)
                    .await,
            );
        }
        let outcomes = join_all(in_flight.into_iter().map(|p| async move {
            match p {
                Ok(confirm) => confirm.await,
                Err(e) => Err(e),
            }
        }))
        .await;
        metrics::histogram!(m::CONFIRM_SECONDS, "transport" => TRANSPORT)
            .record(started.elapsed().as_secs_f64());

        // Returns ride on whichever confirm lapin resolved next, not necessarily their own:
        // match them to messages by message id.
        let mut returned: HashMap<String, String> = HashMap::new();
        for o in &outcomes {
            if let Ok(Confirmation::Ack(Some(r)) | Confirmation::Nack(Some(r))) = o {
                let id = r
                    .delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default();
                returned.insert(id, format!("{} {}", r.reply_code, r.reply_text));
            }
        }
        let mut broken = false;
        let results: Vec<Result<()>> = items
            .iter()
            .zip(outcomes)
            .map(|(it, o)| {
                let id = it.id.to_string();
                let returned_as = returned.get(&id);
                match o {
                    Err(e) => {
                        let err = amqp(format!("publishing {id} to {:?} / {:?}", it.exchange, it.routing_key), e);
                        broken |= breaks_channel(err.kind());
                        Err(err)
                    }
                    Ok(Confirmation::Nack(_)) => {
                        self.stats.record_nack();
                        Err(Error::new(ErrorKind::Nacked, format!("broker nacked {id} to {:?} / {:?}", it.exchange, it.routing_key)))
                    }
                    Ok(Confirmation::Ack(_)) if returned_as.is_some() => {
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
                    Ok(Confirmation::Ack(_)) => Ok(()),
                    Ok(Confirmation::NotRequested) => Err(Error::new(ErrorKind::Config, "the channel is not in confirm mode")),
                }
            })
            .collect();
        if broken {
            *slot = None;
        }
        results
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
