//! One outbox, several brokers: a [`Publisher`] that sends every message to each of its
//! targets with the same id and confirms it only when every target confirmed.
//!
//! This is what a move from one broker to another runs on while both are live: the relay
//! publishes through a [`FanOutPublisher`] and marks a row only once every broker holds its
//! copy. When one target fails, the message fails as a whole: the relay gives the row back
//! and publishes it again later to every target, so the targets that already confirmed get a
//! second copy with the same id, which their consumers' inboxes absorb.
//!
//! The targets can be replaced while it runs ([`FanOutPublisher::set_targets`]): a message
//! goes to the targets listed when its publish began, so a batch in flight during a change is
//! confirmed by the old list, and the next one goes to the new list.

use crate::error::{Error, Result};
use crate::message::OutgoingMessage;
use crate::metrics as m;
use crate::transport::Publisher;
use async_trait::async_trait;
use std::sync::{Arc, RwLock};

/// One named destination of a [`FanOutPublisher`].
#[derive(Clone)]
pub struct PublishTarget {
    /// Its name in errors and metrics (a transport's name, or the broker's redacted URL).
    pub name: String,
    /// Its confirming publisher.
    pub publisher: Arc<dyn Publisher>,
}

crate::debug_showing!(PublishTarget { name });

impl PublishTarget {
    /// `publisher` under `name`.
    #[must_use]
    pub fn new(name: impl Into<String>, publisher: Arc<dyn Publisher>) -> Self {
        Self {
            name: name.into(),
            publisher,
        }
    }
}

/// Publishes each message to every target; a message is confirmed only when all confirmed.
/// Clones share one list of targets.
#[derive(Clone, Debug)]
pub struct FanOutPublisher {
    targets: Arc<RwLock<Arc<[PublishTarget]>>>,
}

impl FanOutPublisher {
    /// A publisher over `targets`: at least one, with distinct names.
    pub fn new(targets: Vec<PublishTarget>) -> Result<Self> {
        Ok(Self {
            targets: Arc::new(RwLock::new(checked(targets)?)),
        })
    }

    /// Replace the targets (at least one, with distinct names; refused otherwise, and the
    /// list in use is kept). Publishes that already began finish on the list they began with.
    pub fn set_targets(&self, targets: Vec<PublishTarget>) -> Result<()> {
        let targets = checked(targets)?;
        *self
            .targets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = targets;
        Ok(())
    }

    /// The targets' names, in order.
    #[must_use]
    pub fn target_names(&self) -> Vec<String> {
        self.current().iter().map(|t| t.name.clone()).collect()
    }

    fn current(&self) -> Arc<[PublishTarget]> {
        self.targets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// `targets` if there is at least one and no name is used twice.
fn checked(targets: Vec<PublishTarget>) -> Result<Arc<[PublishTarget]>> {
    if targets.is_empty() {
        return Err(Error::new(
            crate::ErrorKind::Config,
            "a fan-out publisher needs at least one target",
        ));
    }
    for (n, t) in targets.iter().enumerate() {
        if targets[..n].iter().any(|o| o.name == t.name) {
            return Err(Error::new(
                crate::ErrorKind::Config,
                format!("the publish target {} is named twice", t.name),
            ));
        }
    }
    Ok(targets.into())
}

/// The outcome of one message across the targets: `Ok` when every target confirmed, else an
/// error of the first failed target's kind naming every target that did not confirm.
fn combine(failures: Vec<(&str, Error)>) -> Result<()> {
    let Some(kind) = failures.first().map(|(_, e)| e.kind()) else {
        return Ok(());
    };
    for (target, _) in &failures {
        metrics::counter!(m::FAN_OUT_UNCONFIRMED, "target" => (*target).to_string()).increment(1);
    }
    let text: Vec<String> = failures
        .iter()
        .map(|(target, e)| format!("{target}: {e}"))
        .collect();
    Err(Error::new(
        kind,
        format!("not confirmed by every target ({})", text.join("; ")),
    ))
}

#[async_trait]
impl Publisher for FanOutPublisher {
    async fn publish(&self, message: &OutgoingMessage) -> Result<()> {
        let targets = self.current();
        let results = futures::future::join_all(
            targets
                .iter()
                .map(|t| async move { (t.name.as_str(), t.publisher.publish(message).await) }),
        )
        .await;
        combine(
            results
                .into_iter()
                .filter_map(|(name, r)| r.err().map(|e| (name, e)))
                .collect(),
        )
    }

    async fn publish_batch(&self, messages: &[OutgoingMessage]) -> Vec<Result<()>> {
        let targets = self.current();
        let per_target =
            futures::future::join_all(targets.iter().map(|t| async move {
                (t.name.as_str(), t.publisher.publish_batch(messages).await)
            }))
            .await;
        let mut failures: Vec<Vec<(&str, Error)>> = messages.iter().map(|_| Vec::new()).collect();
        for (name, results) in per_target {
            let mut results = results.into_iter();
            for slot in &mut failures {
                // A target that answered for fewer messages than it was given confirmed none
                // of the rest.
                match results.next() {
                    Some(Ok(())) => {}
                    Some(Err(e)) => slot.push((name, e)),
                    None => slot.push((
                        name,
                        Error::new(crate::ErrorKind::Nacked, "no confirmation for this message"),
                    )),
                }
            }
        }
        failures.into_iter().map(combine).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn an_empty_list_of_targets_is_refused() {
        let e = FanOutPublisher::new(Vec::new()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
    }

    #[test]
    fn targets_are_replaced_only_by_a_valid_list_and_clones_share_them() {
        struct Nowhere;
        #[async_trait]
        impl Publisher for Nowhere {
            async fn publish(&self, _: &OutgoingMessage) -> Result<()> {
                Ok(())
            }
        }
        let target = |name: &str| PublishTarget::new(name, Arc::new(Nowhere));
        let p = FanOutPublisher::new(vec![target("nats")]).unwrap();
        let clone = p.clone();
        p.set_targets(vec![target("nats"), target("kafka")])
            .unwrap();
        assert_eq!(clone.target_names(), ["nats", "kafka"]);
        assert_eq!(
            p.set_targets(Vec::new()).unwrap_err().kind(),
            ErrorKind::Config
        );
        assert_eq!(
            p.set_targets(vec![target("kafka"), target("kafka")])
                .unwrap_err()
                .kind(),
            ErrorKind::Config
        );
        assert_eq!(
            p.target_names(),
            ["nats", "kafka"],
            "a refused list changes nothing"
        );
    }

    #[test]
    fn a_message_is_confirmed_only_when_no_target_failed() {
        assert!(combine(Vec::new()).is_ok());
        let e = combine(vec![
            ("nats", Error::new(ErrorKind::Connection, "stream gone")),
            ("kafka", Error::new(ErrorKind::Timeout, "no ack")),
        ])
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Connection);
        assert!(e.message().contains("nats: "), "{e}");
        assert!(e.message().contains("kafka: "), "{e}");
    }
}
