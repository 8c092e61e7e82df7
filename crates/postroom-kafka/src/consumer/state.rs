//! What the poll thread, the subscriber and the deliveries of one consumer share: per
//! partition, the generation of its ownership (a new one on every assignment and rewind), the
//! offset tracker, the records held back (not due yet, or waiting behind a blocked record),
//! how many of its records the consumer loop holds; and overall, how many records are out
//! (the prefetch bound) and the rewinds asked for by deliveries dropped unsettled.

use super::context::RebalanceContext;
use super::marks::Marks;
use super::record::{Fetched, Held, Record, Tp};
use crate::tracker::OffsetTracker;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc::UnboundedSender;

/// One assigned partition.
#[derive(Debug)]
pub(crate) struct PartitionState {
    pub(crate) generation: u64,
    pub(crate) tracker: OffsetTracker,
    pub(crate) held: VecDeque<Held>,
    /// Records of this partition the consumer loop holds (handed out, not settled).
    pub(crate) handed: usize,
    /// A retry-stage topic: its records are held until due.
    pub(crate) stage: bool,
    /// Whether librdkafka was asked to pause it.
    pub(crate) paused: bool,
    /// Blocking mode: a record of this partition is out.
    pub(crate) busy: bool,
}

/// A rewind asked for by a delivery dropped without being settled: the partition is read
/// again from its lowest unsettled record, after `not_before`.
#[derive(Debug)]
pub(crate) struct Rewind {
    pub(crate) tp: Tp,
    pub(crate) offset: i64,
    pub(crate) generation: u64,
    pub(crate) not_before: Instant,
}

/// What the delivery ledger says of one assigned partition, kept across rewinds.
#[derive(Debug, Default)]
pub(crate) struct LedgerPart {
    /// Counts before this assignment.
    pub(crate) prior: Marks,
    /// First offset handed out in this assignment.
    pub(crate) first: Option<i64>,
    /// Highest offset whose hand-out the ledger holds.
    pub(crate) written: Option<i64>,
}

/// The shared state proper (under one lock).
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) parts: HashMap<Tp, PartitionState>,
    pub(crate) next_generation: u64,
    /// Records fetched and not yet settled or dropped (the prefetch bound).
    pub(crate) out: usize,
    pub(crate) rewinds: Vec<Rewind>,
    /// Offsets were stored since the last commit.
    pub(crate) dirty: bool,
    /// The consumer is closing: revokes do not wait for in-flight work.
    pub(crate) closing: bool,
    /// Delivery counts per assigned partition (absent: not read from the ledger yet).
    pub(crate) ledger: HashMap<Tp, LedgerPart>,
    /// Records forwarded this turn, handed out once the ledger holds them.
    pub(crate) pending: Vec<Fetched>,
    /// The suspect record that is out (nothing else is handed out meanwhile).
    pub(crate) suspect_out: Option<(Tp, i64)>,
    /// A suspect record is due at the head of a partition (nothing else is handed out until
    /// it went out alone).
    pub(crate) suspect_waiting: bool,
    /// The records read ahead reached their bound: every partition is paused until they are
    /// down to half.
    pub(crate) read_ahead_full: bool,
}

impl State {
    /// The record at `offset` of `tp` is settled or gone: a suspect no longer holds others
    /// back.
    pub(crate) fn clear_suspect(&mut self, tp: &Tp, offset: i64) {
        if self
            .suspect_out
            .as_ref()
            .is_some_and(|(t, o)| t == tp && *o == offset)
        {
            self.suspect_out = None;
        }
    }
}

/// The result of settling one record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Its offset (and maybe later ones) may be committed.
    Done,
    /// The partition is no longer owned by this consumer (or was read again): a duplicate will
    /// come to its owner; the inbox absorbs it.
    OwnershipLost,
}

/// Settings the shared state needs.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub(crate) prefetch: usize,
    pub(crate) blocking: bool,
    pub(crate) revoke_wait: Duration,
}

/// Shared by the poll thread, the subscriber and its deliveries.
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) settled: Condvar,
    pub(crate) stop: AtomicBool,
    pub(crate) limits: Limits,
    pub(crate) stage_topics: Vec<String>,
    pub(crate) tx: UnboundedSender<Fetched>,
    pub(crate) consumer: Mutex<Weak<BaseConsumer<RebalanceContext>>>,
    pub(crate) label: String,
}

postroom_core::debug_showing!(Shared { label });

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A fresh state for a newly owned partition.
    pub(crate) fn fresh(&self, st: &mut State, topic: &str) -> PartitionState {
        st.next_generation += 1;
        PartitionState {
            generation: st.next_generation,
            tracker: OffsetTracker::new(),
            held: VecDeque::new(),
            handed: 0,
            stage: self.stage_topics.iter().any(|t| t == topic),
            paused: false,
            busy: false,
        }
    }

    /// Hand `record` of `part` to the subscriber once the ledger holds its delivery (poll
    /// thread, lock held); `out` counts it.
    pub(crate) fn forward(
        &self,
        part: &mut PartitionState,
        out: &mut usize,
        pending: &mut Vec<Fetched>,
        record: Record,
    ) {
        part.tracker.begin(record.offset);
        part.busy = self.limits.blocking;
        let generation = part.generation;
        *out += 1;
        pending.push(Fetched { record, generation });
    }

    /// Send records whose delivery the ledger holds to the subscriber.
    pub(crate) fn send(&self, st: &mut State, ready: Vec<Fetched>) {
        for f in ready {
            if self.tx.send(f).is_err() {
                // The subscriber is gone; the consumer is closing.
                st.out = st.out.saturating_sub(1);
            }
        }
    }

    /// Whether `generation` of `tp` is still owned.
    pub(crate) fn current(&self, tp: &Tp, generation: u64) -> bool {
        self.lock()
            .parts
            .get(tp)
            .is_some_and(|p| p.generation == generation)
    }

    /// Whether `generation` of `tp` is still owned; if so the record is now held by the
    /// consumer loop. Otherwise it is dropped (it will come again to the partition's owner).
    pub(crate) fn take(&self, tp: &Tp, offset: i64, generation: u64) -> bool {
        let mut st = self.lock();
        match st.parts.get_mut(tp) {
            Some(p) if p.generation == generation => {
                p.handed += 1;
                true
            }
            _ => {
                st.out = st.out.saturating_sub(1);
                st.clear_suspect(tp, offset);
                false
            }
        }
    }

    /// Settle the record at `offset`: store the offset that may now be committed (the record and
    /// every earlier one of its partition settled). Called under no other lock.
    pub(crate) fn settle(&self, tp: &Tp, offset: i64, generation: u64) -> Settled {
        // Taken before the lock and released after it: should this be the last handle, the
        // consumer closes (and runs its rebalance callback, which takes the lock) outside it.
        let consumer = self.handle();
        let mut st = self.lock();
        st.out = st.out.saturating_sub(1);
        st.clear_suspect(tp, offset);
        let outcome = match st.parts.get_mut(tp) {
            Some(p) if p.generation == generation => {
                p.handed = p.handed.saturating_sub(1);
                p.busy = false;
                match p.tracker.finish(offset) {
                    Some(next) => self.store(consumer.as_deref(), &mut st, tp, next),
                    None => Settled::Done,
                }
            }
            _ => Settled::OwnershipLost,
        };
        drop(st);
        drop(consumer);
        self.settled.notify_all();
        outcome
    }

    /// Blocking mode: the record at `offset` is to be handled again after `delay`, with these
    /// headers; nothing after it in the partition moves meanwhile.
    pub(crate) fn requeue(&self, mut record: Record, generation: u64, delay: Duration) -> Settled {
        let tp = record.tp();
        let mut st = self.lock();
        st.out = st.out.saturating_sub(1);
        st.clear_suspect(&tp, record.offset);
        let outcome = match st.parts.get_mut(&tp) {
            Some(p) if p.generation == generation => {
                p.handed = p.handed.saturating_sub(1);
                p.busy = false;
                record.headers.remove(crate::headers::DUE_AT);
                p.held.push_front(Held {
                    record,
                    not_before: Some(SystemTime::now() + delay),
                });
                Settled::Done
            }
            _ => Settled::OwnershipLost,
        };
        drop(st);
        self.settled.notify_all();
        outcome
    }

    /// A delivery was dropped without being settled: read its partition again from the lowest
    /// unsettled record after `pause`.
    pub(crate) fn dropped(&self, tp: Tp, offset: i64, generation: u64, pause: Duration) {
        let mut st = self.lock();
        st.out = st.out.saturating_sub(1);
        st.clear_suspect(&tp, offset);
        if let Some(p) = st.parts.get_mut(&tp)
            && p.generation == generation
        {
            p.handed = p.handed.saturating_sub(1);
            st.rewinds.push(Rewind {
                tp,
                offset,
                generation,
                not_before: Instant::now() + pause,
            });
        }
        drop(st);
        self.settled.notify_all();
    }

    /// The consumer, while its poll thread runs.
    pub(crate) fn handle(&self) -> Option<Arc<BaseConsumer<RebalanceContext>>> {
        self.consumer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .upgrade()
    }

    fn store(
        &self,
        consumer: Option<&BaseConsumer<RebalanceContext>>,
        st: &mut State,
        tp: &Tp,
        next: i64,
    ) -> Settled {
        let Some(consumer) = consumer else {
            return Settled::OwnershipLost;
        };
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(&tp.0, tp.1, Offset::Offset(next))
            .is_err()
        {
            return Settled::OwnershipLost;
        }
        match consumer.store_offsets(&tpl) {
            Ok(()) => {
                st.dirty = true;
                Settled::Done
            }
            Err(e) => {
                tracing::debug!(consumer = %self.label, topic = %tp.0, partition = tp.1, error = %e, "offset not stored: the partition is no longer assigned");
                Settled::OwnershipLost
            }
        }
    }
}
