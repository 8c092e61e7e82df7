//! The dead-letter side of one consumer: its parking stream, read by the `ingest` durable.
//! The stream holds two kinds of copies:
//! - parked copies the consumer published with every diagnostic (handed out as they are);
//! - the server's MAX_DELIVERIES and MSG_TERMINATED advisories of the consumer's durables,
//!   captured by the stream's subjects so that none is lost while no process listens. Each is
//!   turned into a parked copy: the message is read from the work stream by its sequence and
//!   described in the `x-dead-letter-*` headers (reason, durable, deliveries); once the
//!   parking store has it, the message is removed from the work stream (unless another
//!   consumer's filter still takes its subject) and the advisory acknowledged.
//!
//! The consumer parks a copy itself on the last delivery `max_deliver` allows (its crash-loop
//! bound is the server's limit), so an advisory means that last delivery did not settle
//! either (the process died on it, or parking failed): the advisory path is the backstop.

use crate::connection::NatsConnection;
use crate::delivery::NatsDelivery;
use crate::error::api;
use crate::naming;
use crate::subscriber::NatsSubscriber;
use crate::topology::wire::{ConsumerList, Success};
use postroom_core::message::headers as h;
use postroom_core::parking::codec as park;
use postroom_core::transport::Handback;
use postroom_core::{
    Delivery, Error, ErrorKind, ParkedMessage, ReceivedMessage, Result, RetryPlan, Subscriber,
};
use serde::Deserialize;
use std::time::Duration;

/// A server advisory about one message of a durable.
#[derive(Clone, Debug, Deserialize)]
pub struct Advisory {
    /// `io.nats.jetstream.advisory.v1.max_deliver` or `…terminated`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Stream.
    pub stream: String,
    /// Durable.
    pub consumer: String,
    /// Stream sequence: a string in one server version, a number in another.
    #[serde(deserialize_with = "number_or_string")]
    pub stream_seq: u64,
    /// Deliveries made.
    #[serde(default)]
    pub deliveries: Option<u64>,
    /// When (RFC 3339).
    #[serde(default)]
    pub timestamp: Option<String>,
}

fn number_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Seq {
        N(u64),
        S(String),
    }
    match Seq::deserialize(d)? {
        Seq::N(n) => Ok(n),
        Seq::S(s) => s.trim().parse().map_err(serde::de::Error::custom),
    }
}

impl Advisory {
    /// Parse an advisory body.
    pub fn parse(body: &[u8]) -> Result<Self> {
        serde_json::from_slice(body).map_err(|e| {
            Error::new(
                ErrorKind::InvalidData,
                format!("unreadable JetStream advisory: {e}"),
            )
        })
    }

    /// The reason postroom records (`max_deliveries`, `terminated`).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        if self.kind.ends_with("terminated") {
            "terminated"
        } else {
            "max_deliveries"
        }
    }
}

/// Reads one consumer's parking stream.
pub struct DeadLetterSubscriber {
    inner: NatsSubscriber,
    conn: NatsConnection,
    prefix: String,
    consumer: String,
}

impl DeadLetterSubscriber {
    pub(crate) fn new(
        inner: NatsSubscriber,
        conn: NatsConnection,
        prefix: &str,
        consumer: &str,
    ) -> Self {
        Self {
            inner,
            conn,
            prefix: prefix.to_string(),
            consumer: consumer.to_string(),
        }
    }

    /// Turn an advisory into a parked copy; `None` (advisory acknowledged) when the message is
    /// no longer in the work stream (stored already and removed, or aged out).
    async fn parked_from_advisory(&self, d: NatsDelivery) -> Result<Option<DeadLetter>> {
        let adv = match Advisory::parse(&d.message().body) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "dropping an unreadable advisory");
                let _ = d.ack().await;
                return Ok(None);
            }
        };
        let stream = self
            .conn
            .jetstream()
            .get_stream_no_info(adv.stream.clone())
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Connection,
                    format!("opening stream {}: {e}", adv.stream),
                )
            })?;
        let stored = match stream.get_raw_message(adv.stream_seq).await {
            Ok(m) => m,
            Err(e) if e.to_string().to_ascii_lowercase().contains("not found") => {
                tracing::warn!(stream = %adv.stream, seq = adv.stream_seq, durable = %adv.consumer, "advisory for a message no longer in the work stream: nothing to park");
                d.ack().await.map_err(|(e, _)| e)?;
                return Ok(None);
            }
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Connection,
                    format!("reading {} sequence {}: {e}", adv.stream, adv.stream_seq),
                ));
            }
        };
        let (id, mut headers) = crate::headers::from_nats(Some(&stored.headers));
        let topic = stored
            .subject
            .as_str()
            .strip_prefix(&format!("{}.", self.prefix))
            .unwrap_or(stored.subject.as_str())
            .to_string();
        headers.entry(h::ORIGINAL_ROUTE.into()).or_insert(topic);
        headers.insert(park::DEAD_LETTER_REASON.into(), adv.reason().into());
        headers.insert(
            park::DEAD_LETTERED_FROM.into(),
            format!("{}/{}", adv.stream, adv.consumer),
        );
        if let Some(n) = adv.deliveries {
            headers.insert(park::DEAD_LETTER_COUNT.into(), n.to_string());
        }
        if let Some(t) = &adv.timestamp {
            headers.insert(park::DEAD_LETTERED_AT.into(), t.clone());
        }
        let message = ReceivedMessage::new(
            id,
            naming::parking_subject(&self.prefix, &self.consumer),
            headers,
            stored.payload.to_vec(),
        );
        Ok(Some(DeadLetter {
            message,
            advisory: Some((adv, stored.subject.to_string())),
            inner: d,
            conn: self.conn.clone(),
            consumer: self.consumer.clone(),
        }))
    }
}

#[async_trait::async_trait]
impl Subscriber for DeadLetterSubscriber {
    type Delivery = DeadLetter;

    async fn next(&mut self, max_wait: Duration) -> Result<Option<DeadLetter>> {
        let Some(d) = self.inner.next(max_wait).await? else {
            return Ok(None);
        };
        if d.message().routing_key.starts_with("$JS.EVENT.ADVISORY.") {
            return self.parked_from_advisory(d).await;
        }
        Ok(Some(DeadLetter {
            message: d.message().clone(),
            advisory: None,
            inner: d,
            conn: self.conn.clone(),
            consumer: self.consumer.clone(),
        }))
    }

    async fn close(&mut self) {
        self.inner.close().await;
    }
}

/// A copy from the parking stream: a parked copy, or an advisory turned into one.
pub struct DeadLetter {
    message: ReceivedMessage,
    advisory: Option<(Advisory, String)>,
    inner: NatsDelivery,
    conn: NatsConnection,
    consumer: String,
}

impl DeadLetter {
    /// Remove the message from the work stream unless a durable of another consumer still
    /// takes its subject.
    async fn remove_from_work_stream(&self, adv: &Advisory, subject: &str) -> Result<()> {
        let js = self.conn.jetstream();
        let mine = format!("{}__", self.consumer);
        let mut offset = 0;
        loop {
            let page: ConsumerList = api(
                js,
                &format!("listing durables of {}", adv.stream),
                format!("CONSUMER.LIST.{}", adv.stream),
                &serde_json::json!({ "offset": offset }),
            )
            .await?;
            for c in &page.consumers {
                if !c.name.starts_with(&mine)
                    && naming::subject_matches(&c.config.filter_subject, subject)
                {
                    tracing::info!(seq = adv.stream_seq, other = %c.name, "parked from the advisory; kept in the work stream for another consumer");
                    return Ok(());
                }
            }
            offset += page.consumers.len();
            if page.consumers.is_empty() || offset >= page.total {
                break;
            }
        }
        let r: Result<Success> = api(
            js,
            &format!("removing sequence {} from {}", adv.stream_seq, adv.stream),
            format!("STREAM.MSG.DELETE.{}", adv.stream),
            &serde_json::json!({ "seq": adv.stream_seq }),
        )
        .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if crate::error::is_not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[async_trait::async_trait]
impl Delivery for DeadLetter {
    fn message(&self) -> &ReceivedMessage {
        &self.message
    }

    /// The parking store has it: remove the source message (for an advisory), then
    /// acknowledge the copy in the parking stream.
    async fn ack(self) -> std::result::Result<(), Handback<Self>> {
        if let Some((adv, subject)) = &self.advisory
            && let Err(e) = self.remove_from_work_stream(adv, subject).await
        {
            return Err((e, self));
        }
        let DeadLetter {
            message,
            advisory,
            inner,
            conn,
            consumer,
        } = self;
        inner.ack().await.map_err(|(e, inner)| {
            (
                e,
                DeadLetter {
                    message,
                    advisory,
                    inner,
                    conn,
                    consumer,
                },
            )
        })
    }

    async fn retry(self, _plan: &RetryPlan) -> std::result::Result<(), Handback<Self>> {
        Err((
            Error::new(
                ErrorKind::Unsupported,
                "a parked copy is not retried; redrive it",
            ),
            self,
        ))
    }

    async fn park(self, _record: &ParkedMessage) -> std::result::Result<(), Handback<Self>> {
        self.ack().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_seq_as_number_or_string() {
        let n = Advisory::parse(br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S","consumer":"c__x","stream_seq":42,"deliveries":5}"#).unwrap();
        let s = Advisory::parse(br#"{"type":"io.nats.jetstream.advisory.v1.terminated","stream":"S","consumer":"c__x","stream_seq":"42"}"#).unwrap();
        assert_eq!((n.stream_seq, s.stream_seq), (42, 42));
        assert_eq!((n.reason(), s.reason()), ("max_deliveries", "terminated"));
        assert!(Advisory::parse(br#"{"stream_seq":"x"}"#).is_err());
    }
}
