//! Names of one consumer's queues and exchanges: the workload prefix, then the suffixes
//! `.retry`, `.retry.<delay>`, `.dlx`, `.parking`.

use postroom_core::RetryLadder;
use std::time::Duration;

/// Routing key on `<consumer>.dlx` that leads to the parking queue.
pub const PARKING_KEY: &str = "parked";

/// The names of one consumer's topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerNames {
    /// Consumer name.
    pub consumer: String,
    /// Work queue: `<prefix>.<consumer>`.
    pub work_queue: String,
    /// Retry exchange (direct): `<work>.retry`. Keys: stage names (`5s`) lead to the stage
    /// queues; the work queue's own name leads back to the work queue (retry return, redrive).
    pub retry_exchange: String,
    /// Dead-letter exchange (direct): `<work>.dlx`; key [`PARKING_KEY`] leads to parking.
    pub dlx_exchange: String,
    /// Parking queue: `<work>.parking`.
    pub parking_queue: String,
}

impl ConsumerNames {
    /// Names for `consumer` under `prefix` (empty prefix: no prefix).
    #[must_use]
    pub fn new(prefix: &str, consumer: &str) -> Self {
        let work_queue = if prefix.is_empty() {
            consumer.to_string()
        } else {
            format!("{prefix}.{consumer}")
        };
        Self {
            consumer: consumer.to_string(),
            retry_exchange: format!("{work_queue}.retry"),
            dlx_exchange: format!("{work_queue}.dlx"),
            parking_queue: format!("{work_queue}.parking"),
            work_queue,
        }
    }

    /// Routing key on the retry exchange that leads back to the work queue.
    #[must_use]
    pub fn return_key(&self) -> &str {
        &self.work_queue
    }

    /// The stage queue of a delay: `<work>.retry.5s`.
    #[must_use]
    pub fn retry_queue(&self, delay: Duration) -> String {
        format!("{}.retry.{}", self.work_queue, Self::stage_key(delay))
    }

    /// The consistent-hash exchange of a partitioned consumer: `<work>.partitioned`.
    #[must_use]
    pub fn partition_exchange(&self) -> String {
        format!("{}.partitioned", self.work_queue)
    }

    /// Partition queue `i` of a partitioned consumer: `<work>.p<i>`.
    #[must_use]
    pub fn partition_queue(&self, i: u16) -> String {
        format!("{}.p{i}", self.work_queue)
    }

    /// The routing key of a delay stage on the retry exchange: `5s`.
    #[must_use]
    pub fn stage_key(delay: Duration) -> String {
        // The core keeps its duration formatter private; a one-stage ladder names it the same way.
        RetryLadder::new(vec![delay]).map_or_else(|| "0ms".to_string(), |l| l.stage_name(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_names() {
        let n = ConsumerNames::new("inventory", "orders");
        assert_eq!(n.work_queue, "inventory.orders");
        assert_eq!(n.retry_exchange, "inventory.orders.retry");
        assert_eq!(n.dlx_exchange, "inventory.orders.dlx");
        assert_eq!(n.parking_queue, "inventory.orders.parking");
        assert_eq!(
            n.retry_queue(Duration::from_secs(30)),
            "inventory.orders.retry.30s"
        );
        assert_eq!(ConsumerNames::new("", "orders").work_queue, "orders");
    }
}
