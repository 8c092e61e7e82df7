//! The consumer's rebalance callbacks, run on its poll thread. On revoke: wait (bounded) for
//! the records of the revoked partitions that the consumer loop holds to settle, commit what is
//! done, then forget the partitions: a record settled later is "ownership lost, a duplicate
//! will come". On assign: a fresh state per partition (new generation, nothing held, nothing
//! paused), and every assigned partition resumed, so no pause outlives the assignment it was
//! made in.

use super::record::Tp;
use super::state::Shared;
use rdkafka::TopicPartitionList;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use std::sync::Arc;
use std::time::Instant;

/// The consumer context: rebalance callbacks over the shared state.
pub struct RebalanceContext {
    pub(crate) shared: Arc<Shared>,
}

impl ClientContext for RebalanceContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error => {
                tracing::error!(consumer = %self.shared.label, facility = fac, "{log_message}");
            }
            L::Warning => {
                tracing::warn!(consumer = %self.shared.label, facility = fac, "{log_message}")
            }
            L::Notice | L::Info => {
                tracing::info!(consumer = %self.shared.label, facility = fac, "{log_message}")
            }
            L::Debug => {
                tracing::debug!(consumer = %self.shared.label, facility = fac, "{log_message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(consumer = %self.shared.label, error = %error, reason, "Kafka consumer error");
    }
}

fn partitions(tpl: &TopicPartitionList) -> Vec<Tp> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let revoked = partitions(tpl);
        // Once the poll thread let go of its consumer, the consumer is being closed: nothing
        // is waited for or committed here (the poll thread committed before closing).
        let closing = self.shared.handle().is_none();
        let lost = closing || consumer.assignment_lost();
        let shared = &self.shared;
        let mut st = shared.lock();
        let wait = if lost || st.closing {
            std::time::Duration::ZERO
        } else {
            shared.limits.revoke_wait
        };
        let deadline = Instant::now() + wait;
        loop {
            let busy: usize = revoked
                .iter()
                .filter_map(|tp| st.parts.get(tp))
                .map(|p| p.handed)
                .sum();
            if busy == 0 {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(consumer = %shared.label, in_flight = busy, "partitions revoked with records still in flight: their work is abandoned, the new owner gets them again");
                break;
            }
            st = shared
                .settled
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(st);
        if !lost {
            // Commit what is done before the partitions go.
            if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
                tracing::debug!(consumer = %shared.label, error = %e, "nothing committed on revoke");
            }
        }
        let mut st = shared.lock();
        st.dirty = false;
        for tp in &revoked {
            st.parts.remove(tp);
            st.ledger.remove(tp);
        }
        if st
            .suspect_out
            .as_ref()
            .is_some_and(|(tp, _)| revoked.contains(tp))
        {
            st.suspect_out = None;
        }
        tracing::info!(consumer = %shared.label, partitions = revoked.len(), lost, "partitions revoked");
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(tpl) = rebalance else {
            return;
        };
        let assigned = partitions(tpl);
        {
            let shared = &self.shared;
            let mut st = shared.lock();
            for tp in &assigned {
                let fresh = shared.fresh(&mut st, &tp.0);
                st.parts.insert(tp.clone(), fresh);
                // Read from the delivery ledger again: another member may have handed out its
                // records since.
                st.ledger.remove(tp);
            }
        }
        if let Err(e) = consumer.resume(tpl) {
            tracing::debug!(consumer = %self.shared.label, error = %e, "resuming assigned partitions");
        }
        tracing::info!(consumer = %self.shared.label, partitions = assigned.len(), "partitions assigned");
    }
}
