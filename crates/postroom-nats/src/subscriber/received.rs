//! A JetStream message as postroom sees it: id and headers from the NATS headers, the topic
//! from the subject, the delivery count from the ack subject, and the retry attempt.
//!
//! The attempt. A delayed nak cannot rewrite the stored message, so `x-retry-attempt` cannot
//! be incremented in the copy the way a republishing transport does. It is derived instead:
//! the attempt a copy was published with (0 unless another transport or tool set it) plus the
//! deliveries this durable made before this one (`num_delivered - 1`). Each delayed nak is
//! followed by exactly one redelivery, so retries count one by one. A redelivery after an
//! ack-wait expiry (a consumer that died or hung) counts as an attempt too: the budget can
//! only end sooner and the ladder's delays only grow, never shrink, and the crash-loop bound
//! (the same delivery count) stays what it is.

use crate::naming::Lane;
use crate::retry_book::RetryBook;
use postroom_core::message::{attempt_of, headers as h};
use postroom_core::{MessageId, ReceivedMessage};

/// Delivery facts from the `$JS.ACK` reply subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckInfo {
    /// Deliveries of this copy by this durable, this one included.
    pub delivered: u32,
    /// Stream sequence.
    pub stream_seq: u64,
}

/// Parse the `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>` subject
/// (and the longer form with domain and account hash).
#[must_use]
pub fn ack_info(reply: &str) -> Option<AckInfo> {
    let rest = reply.strip_prefix("$JS.ACK.")?;
    let t: Vec<&str> = rest.split('.').collect();
    let base = match t.len() {
        7 => 0,
        n if n >= 9 => 2,
        _ => return None,
    };
    Some(AckInfo {
        delivered: t.get(base + 2)?.parse().ok()?,
        stream_seq: t.get(base + 3)?.parse().ok()?,
    })
}

/// What the subscriber needs to describe a message of one lane.
#[derive(Clone, Debug)]
pub struct Describe {
    /// Workload prefix.
    pub prefix: String,
    /// Whether topic subjects end in a partition word.
    pub partitioned: bool,
    /// The consumer.
    pub consumer: String,
    /// Read the copies as they are (a parking stream): no attempt derived, no bookkeeping.
    pub raw: bool,
}

impl Describe {
    /// The topic of `subject` (None for a subject outside `<prefix>.`).
    #[must_use]
    pub fn topic<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let t = subject
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix('.')?;
        if self.partitioned {
            t.rsplit_once('.').map(|(topic, _)| topic)
        } else {
            Some(t)
        }
    }

    /// The postroom message of one JetStream delivery.
    #[must_use]
    pub fn received(
        &self,
        lane: &Lane,
        book: &RetryBook,
        msg: &async_nats::Message,
        info: AckInfo,
    ) -> ReceivedMessage {
        let (id, mut headers): (Option<MessageId>, _) =
            crate::headers::from_nats(msg.headers.as_ref());
        let routing_key = if lane.direct {
            headers
                .get(h::ORIGINAL_ROUTE)
                .cloned()
                .unwrap_or_else(|| self.consumer.clone())
        } else {
            self.topic(msg.subject.as_str())
                .unwrap_or(msg.subject.as_str())
                .to_string()
        };
        let attempt = attempt_of(&headers).saturating_add(info.delivered.saturating_sub(1));
        if attempt > 0 && !self.raw {
            headers.insert(h::RETRY_ATTEMPT.into(), attempt.to_string());
            book.annotate(&lane.durable, info.stream_seq, &mut headers);
        }
        ReceivedMessage::new(id, routing_key, headers, msg.payload.to_vec())
            .redelivered(info.delivered > 1)
            .deliveries(info.delivered.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_subjects_of_both_forms() {
        assert_eq!(
            ack_info("$JS.ACK.S.C.3.100.7.1790230470084404000.42"),
            Some(AckInfo {
                delivered: 3,
                stream_seq: 100
            })
        );
        assert_eq!(
            ack_info("$JS.ACK.hub.hash.S.C.2.50.9.1790230470084404000.0.tok"),
            Some(AckInfo {
                delivered: 2,
                stream_seq: 50
            })
        );
        assert_eq!(ack_info("$JS.ACK.S.C.x"), None);
        let d = Describe {
            prefix: "p".into(),
            partitioned: true,
            consumer: "c".into(),
            raw: false,
        };
        assert_eq!(d.topic("p.order.created.3"), Some("order.created"));
        assert_eq!(d.topic("q.x"), None);
    }
}
