//! Scheduled sends: an outbox row that is not published before a time ("charge in 3 days",
//! "remind in an hour"), written in the business transaction like any other row.
//!
//! It is the relay that waits: the row is not claimed before its time, and the relay sleeps no
//! longer than until the next row falls due, so no broker feature is needed and every broker
//! gets scheduled sends the same way. A scheduled row can be cancelled, in a transaction, until
//! a relay takes it.
//!
//! Order: a scheduled message is unordered relative to the other messages of its aggregate. The
//! outbox keeps it under its own id (as a message without an aggregate), so it neither waits
//! behind the aggregate's earlier rows nor holds back its later ones: "charge in 3 days" does
//! not stop the order's other events for 3 days. Its `x-aggregate-key` header is kept, so a
//! broker still partitions it with its aggregate. A consumer that guards aggregate versions
//! should not be given a scheduled message that carries a version of that sequence (a version
//! guard would see it late and take it for a duplicate): schedule commands and reminders, not
//! state changes.

use crate::message::OutgoingMessage;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The earliest time a scheduled row may be published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotBefore {
    /// At this time (a time already past is due at once).
    At(DateTime<Utc>),
    /// This long after the row is written, by the store's clock (the database server's, on
    /// PostgreSQL: the application's clock and the server's need not agree).
    After(Duration),
}

/// A message to write into the outbox for publication not before a time: made by
/// [`OutgoingMessage::not_before`] or [`OutgoingMessage::deliver_after`], written by a store's
/// `outbox::schedule`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "write it into the outbox with the store's outbox::schedule"]
pub struct ScheduledMessage {
    /// The message, as it is published.
    pub message: OutgoingMessage,
    /// When it may be published at the earliest.
    pub not_before: NotBefore,
}

impl OutgoingMessage {
    /// This message, to be published not before `at`.
    pub fn not_before(self, at: DateTime<Utc>) -> ScheduledMessage {
        ScheduledMessage {
            message: self,
            not_before: NotBefore::At(at),
        }
    }

    /// This message, to be published not before `delay` after its row is written.
    pub fn deliver_after(self, delay: Duration) -> ScheduledMessage {
        ScheduledMessage {
            message: self,
            not_before: NotBefore::After(delay),
        }
    }
}

impl ScheduledMessage {
    /// The key the outbox orders this row under: its own id (a scheduled message is
    /// unordered, see the module documentation).
    #[must_use]
    pub fn ordering_key(&self) -> String {
        self.message.id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Envelope;

    #[test]
    fn a_scheduled_message_is_its_own_ordering_key_and_keeps_its_aggregate_header() {
        let env = Envelope::builder("payment.charge", "t")
            .aggregate("order", "o1", 3)
            .build();
        let m = OutgoingMessage::from_envelope(&env, "payment.charge");
        let s = m.clone().deliver_after(Duration::from_secs(3));
        assert_eq!(s.ordering_key(), env.id.to_string());
        assert_eq!(s.message, m);
        assert_eq!(s.not_before, NotBefore::After(Duration::from_secs(3)));
        let at = Utc::now();
        assert_eq!(m.not_before(at).not_before, NotBefore::At(at));
    }
}
