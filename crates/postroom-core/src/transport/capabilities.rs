//! What a transport can do, stated once, so that the consumer loop and the command line never
//! ask which broker they are talking to. A consumer whose settings the transport cannot keep
//! (a retry ladder with a delay it has no stage for, a lease shorter than the handler timeout,
//! an unbounded crash loop) is refused when it is built, not at its first retry.

use crate::error::{Error, ErrorKind, Result};
use crate::retry::RetryLadder;
use crate::retry::ladder::format_duration;
use std::time::Duration;

/// How a transport keeps the delay of a retry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DelayCapability {
    /// A fixed set of stage delays, one destination each (RabbitMQ TTL queues, Kafka retry
    /// topics). A retry waits exactly its stage's delay; jitter cannot be kept.
    Stages(RetryLadder),
    /// Any delay per message, up to a maximum (the SQLite and PostgreSQL queues, NATS
    /// JetStream's delayed nak, SQS visibility timeout). Jitter is kept.
    UpTo(Duration),
}

impl DelayCapability {
    /// Whether every delay of `ladder` can be kept; the error names both sides.
    pub fn check(&self, ladder: &RetryLadder) -> Result<()> {
        match self {
            DelayCapability::Stages(stages) => {
                let missing: Vec<String> = ladder
                    .delays()
                    .iter()
                    .filter(|d| !stages.delays().contains(d))
                    .map(|d| format_duration(*d))
                    .collect();
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(Error::new(
                        ErrorKind::Config,
                        format!(
                            "the consumer's retry ladder {ladder} needs stage(s) {} that the transport's topology does not have (its stages: {stages}); declare the ladder once and derive both from it",
                            missing.join(",")
                        ),
                    ))
                }
            }
            DelayCapability::UpTo(max) => match ladder.delays().iter().find(|d| *d > max) {
                None => Ok(()),
                Some(d) => Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "the consumer's retry ladder {ladder} has a delay of {} but the transport keeps delays of at most {}",
                        format_duration(*d),
                        format_duration(*max)
                    ),
                )),
            },
        }
    }

    /// True when a retry waits exactly the stage delay (no jitter can be kept).
    #[must_use]
    pub fn is_staged(&self) -> bool {
        matches!(self, DelayCapability::Stages(_))
    }
}

/// How a transport counts deliveries of one copy, the means of bounding a crash loop (a
/// message whose handling kills the consumer before it settles, so no handler error is ever
/// returned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedeliveryCounting {
    /// The transport reports how many times it delivered a copy
    /// ([`ReceivedMessage::deliveries`](crate::ReceivedMessage::deliveries)).
    pub counted: bool,
    /// The transport dead-letters a copy by itself after this many deliveries (quorum
    /// `delivery-limit` + 1, JetStream `MaxDeliver`, SQS `maxReceiveCount`). The consumer parks
    /// a copy with its diagnostics on the last delivery the transport will make, before the
    /// transport's own limit fires without them.
    pub native_limit: Option<u32>,
}

/// Whether a transport can keep per-key order across consumer processes by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrdering {
    /// Copies of one key may reach competing consumers in any order (work queues, table
    /// queues, SQS standard); order is kept by the version guard.
    None,
    /// Copies of one key reach one consumer in publish order (Kafka partitions, RabbitMQ
    /// partitioned queues with single active consumer, NATS partitioned subjects, SQS FIFO
    /// groups); the consumer keeps it with [`Ordering::PerKey`](crate::consumer::Ordering).
    Partitioned,
}

/// What a transport can do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Retry delays.
    pub delay: DelayCapability,
    /// Delivery counting (crash-loop bound).
    pub redelivery: RedeliveryCounting,
    /// How long a delivery stays owned by its consumer before the transport gives it to another
    /// (lease, ack wait, visibility timeout), when that is fixed; `None` when the transport
    /// waits for the consumer (an AMQP channel keeps unacked deliveries until it closes) or
    /// extends ownership while the handler runs.
    pub ownership: Option<Duration>,
    /// Per-key order.
    pub ordering: KeyOrdering,
    /// Largest message body the transport takes.
    pub max_message_bytes: usize,
}

impl Capabilities {
    /// Check a consumer's settings against these capabilities: its ladder can be kept, a
    /// fixed ownership outlasts the handler timeout, and crash loops are bounded.
    pub fn check_consumer(
        &self,
        ladder: &RetryLadder,
        handler_timeout: Duration,
        max_deliveries: u32,
    ) -> Result<()> {
        self.delay.check(ladder)?;
        if let Some(owned) = self.ownership
            && owned <= handler_timeout
        {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the transport's lease / visibility timeout ({}) must be longer than the handler timeout ({}): a slower handler would lose its delivery to another consumer",
                    format_duration(owned),
                    format_duration(handler_timeout)
                ),
            ));
        }
        if max_deliveries == 0 {
            return Err(Error::new(
                ErrorKind::Config,
                "max_deliveries must be at least 1 (it bounds a message that crashes its consumer)",
            ));
        }
        Ok(())
    }

    /// The delivery number from which the consumer parks a copy without handling it: the
    /// lower of the configured bound and the transport's own limit.
    #[must_use]
    pub fn crash_loop_bound(&self, max_deliveries: u32) -> u32 {
        match self.redelivery.native_limit {
            Some(native) => native.min(max_deliveries),
            None => max_deliveries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(delay: DelayCapability) -> Capabilities {
        Capabilities {
            delay,
            redelivery: RedeliveryCounting {
                counted: true,
                native_limit: Some(9),
            },
            ownership: Some(Duration::from_secs(30)),
            ordering: KeyOrdering::None,
            max_message_bytes: 1 << 20,
        }
    }

    /// Checks a consumer with `ladder` (in its text form), a 5 s handler timeout and at most
    /// 5 deliveries against `c`.
    fn check_ladder(c: &Capabilities, ladder: &str) -> Result<()> {
        c.check_consumer(&ladder.parse().unwrap(), Duration::from_secs(5), 5)
    }

    #[test]
    fn a_ladder_with_a_stage_the_topology_lacks_is_refused_naming_both() {
        let c = caps(DelayCapability::Stages("1s".parse().unwrap()));
        let err = c
            .check_consumer(&RetryLadder::default(), Duration::from_secs(5), 5)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("5s,30s,5m") && text.contains("stages: 1s"),
            "{text}"
        );
        assert!(check_ladder(&c, "1s").is_ok());
    }

    #[test]
    fn a_delay_over_the_maximum_is_refused() {
        let c = caps(DelayCapability::UpTo(Duration::from_secs(900)));
        assert!(check_ladder(&c, "5s,30s,20m").is_err());
        assert!(check_ladder(&c, "5s,30s,15m").is_ok());
    }

    #[test]
    fn a_lease_not_longer_than_the_handler_timeout_is_refused() {
        let c = caps(DelayCapability::UpTo(Duration::from_secs(3600)));
        let err = c
            .check_consumer(&RetryLadder::default(), Duration::from_secs(30), 5)
            .unwrap_err();
        assert!(err.to_string().contains("handler timeout"), "{err}");
        assert_eq!(c.crash_loop_bound(20), 9);
        assert_eq!(c.crash_loop_bound(4), 4);
    }
}
