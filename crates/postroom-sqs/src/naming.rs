//! Queue names. SQS names are 1–80 characters of `[A-Za-z0-9_-]`, FIFO names end in `.fifo`;
//! a consumer `inventory` under prefix `shop` owns `shop-inventory` and its DLQ
//! `shop-inventory-dlq` (`shop-inventory.fifo`, `shop-inventory-dlq.fifo` when FIFO).

use postroom_core::{Error, ErrorKind, Result};

const MAX_NAME: usize = 80;
const FIFO_SUFFIX: &str = ".fifo";
const DLQ_SUFFIX: &str = "-dlq";

/// The queues of one consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueNames {
    /// The consumer.
    pub consumer: String,
    /// Its work queue.
    pub work: String,
    /// Its dead-letter queue.
    pub dlq: String,
}

fn valid_part(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl QueueNames {
    /// The names for `consumer` under `prefix`; a clear error when they cannot be SQS names.
    pub fn new(prefix: &str, consumer: &str, fifo: bool) -> Result<Self> {
        if consumer.is_empty() || !valid_part(consumer) || !valid_part(prefix) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "SQS queue names allow only [A-Za-z0-9_-]: consumer {consumer:?} with prefix {prefix:?} cannot name a queue"
                ),
            ));
        }
        let base = if prefix.is_empty() {
            consumer.to_string()
        } else {
            format!("{prefix}-{consumer}")
        };
        let suffix = if fifo { FIFO_SUFFIX } else { "" };
        let dlq = format!("{base}{DLQ_SUFFIX}{suffix}");
        if dlq.len() > MAX_NAME {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the queue name {dlq:?} is longer than SQS's {MAX_NAME} characters; shorten the prefix or the consumer name"
                ),
            ));
        }
        Ok(Self {
            consumer: consumer.to_string(),
            work: format!("{base}{suffix}"),
            dlq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_limits() {
        let n = QueueNames::new("shop", "inventory", false).unwrap();
        assert_eq!(
            (n.work.as_str(), n.dlq.as_str()),
            ("shop-inventory", "shop-inventory-dlq")
        );
        let f = QueueNames::new("", "inv", true).unwrap();
        assert_eq!(
            (f.work.as_str(), f.dlq.as_str()),
            ("inv.fifo", "inv-dlq.fifo")
        );
        assert!(QueueNames::new("shop", "a.b", false).is_err());
        assert!(QueueNames::new("shop", "", false).is_err());
        assert!(QueueNames::new(&"p".repeat(70), "consumer", true).is_err());
    }
}
