//! The poll thread of one consumer: the only caller of `poll`, so rebalance callbacks run
//! here. Each turn it performs the rewinds deliveries asked for, releases held records that are
//! due (a retry copy is never handed out before its due time), pauses the partitions that hold
//! records back (and all of them while the prefetch bound is reached) and resumes the others,
//! polls what is buffered (up to the prefetch bound), writes to the delivery ledger that those
//! records are handed out, then hands them out; and commits stored offsets every commit
//! interval. A record the ledger counts as handed out before (a suspect: the consumer died or
//! lost the partition while it was out) is handed out alone.

use super::context::RebalanceContext;
use super::ledger::Ledger;
use super::record::{Fetched, Held, Record, Tp};
use super::state::{LedgerPart, Shared};
use crate::headers::due_at;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Longest wait of one poll.
const TURN: Duration = Duration::from_millis(50);

/// How long a partition waits before it is read again when the ledger could not be read or
/// written.
const LEDGER_PAUSE: Duration = Duration::from_secs(1);

/// Run until the shared stop flag is set; then commit what is stored and close the consumer
/// (leaving the group, so its partitions move at once).
pub(crate) fn run(
    consumer: Arc<BaseConsumer<RebalanceContext>>,
    shared: Arc<Shared>,
    commit_every: Duration,
    mut ledger: Option<Ledger>,
) {
    let mut last_commit = Instant::now();
    while !shared.stopping() {
        rewind(&consumer, &shared);
        let wait = release_and_pause(&consumer, &shared);
        let budget = shared
            .limits
            .prefetch
            .saturating_sub(shared.lock().out)
            .max(1);
        for i in 0..budget {
            match consumer.poll(if i == 0 { wait } else { Duration::ZERO }) {
                Some(Ok(m)) => {
                    let record = Record::from_message(&m);
                    drop(m);
                    if let Some(record) = counted(&shared, ledger.as_mut(), record) {
                        on_record(&shared, record);
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) | None => break,
                Some(Err(e)) => {
                    tracing::warn!(consumer = %shared.label, error = %e, "poll failed");
                    std::thread::sleep(TURN);
                    break;
                }
            }
        }
        hand_out(&consumer, &shared, ledger.as_mut());
        if last_commit.elapsed() >= commit_every {
            last_commit = Instant::now();
            let dirty = std::mem::take(&mut shared.lock().dirty);
            if dirty && let Err(e) = consumer.commit_consumer_state(CommitMode::Async) {
                tracing::debug!(consumer = %shared.label, error = %e, "commit failed");
                shared.lock().dirty = true;
            }
        }
    }
    shared.lock().closing = true;
    if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
        tracing::debug!(consumer = %shared.label, error = %e, "nothing committed on close");
    }
    // Dropping the last handle closes the consumer: it leaves the group (revoke callback runs
    // here, without waiting).
    drop(consumer);
    tracing::debug!(consumer = %shared.label, "consumer closed");
}

/// The record with its delivery number, from the ledger (read for its partition first when
/// this assignment has not read it yet). When the ledger cannot be read, the record is not
/// handed out: its partition is read again from there after a pause.
fn counted(shared: &Shared, ledger: Option<&mut Ledger>, mut record: Record) -> Option<Record> {
    let Some(ledger) = ledger else {
        return Some(record);
    };
    let tp = record.tp();
    let known = shared.lock().ledger.contains_key(&tp);
    if !known {
        match ledger.load(&tp) {
            Ok(prior) => {
                shared.lock().ledger.insert(
                    tp.clone(),
                    LedgerPart {
                        prior,
                        ..LedgerPart::default()
                    },
                );
            }
            Err(e) => {
                tracing::warn!(consumer = %shared.label, error = %e, "delivery ledger unreadable: the partition waits");
                read_again(shared, &tp, record.offset);
                return None;
            }
        }
    }
    let st = shared.lock();
    let part = st.ledger.get(&tp)?;
    record.deliveries = part.prior.count(record.offset).saturating_add(1);
    Some(record)
}

/// Read `tp` again from `offset` (at the latest) after [`LEDGER_PAUSE`].
fn read_again(shared: &Shared, tp: &Tp, offset: i64) {
    let mut st = shared.lock();
    if let Some(part) = st.parts.get(tp) {
        let generation = part.generation;
        st.rewinds.push(super::state::Rewind {
            tp: tp.clone(),
            offset,
            generation,
            not_before: Instant::now() + LEDGER_PAUSE,
        });
    }
}

/// Write to the ledger that the records forwarded this turn are handed out, then hand them
/// out. Before a suspect goes out, what is settled is committed, so that a crash during the
/// suspect's handling counts against it and nothing else.
fn hand_out(
    consumer: &BaseConsumer<RebalanceContext>,
    shared: &Shared,
    ledger: Option<&mut Ledger>,
) {
    let mut st = shared.lock();
    if st.pending.is_empty() {
        return;
    }
    let pending = std::mem::take(&mut st.pending);
    let Some(ledger) = ledger else {
        shared.send(&mut st, pending);
        return;
    };
    let suspect = pending.iter().any(|f| f.record.suspect());
    let mut span: BTreeMap<Tp, (i64, i64)> = BTreeMap::new();
    for f in &pending {
        let e = span
            .entry(f.record.tp())
            .or_insert((f.record.offset, f.record.offset));
        e.0 = e.0.min(f.record.offset);
        e.1 = e.1.max(f.record.offset);
    }
    let mut writes = Vec::new();
    for (tp, (low, high)) in &span {
        let committed = st
            .parts
            .get(tp)
            .and_then(|p| p.tracker.committable())
            .unwrap_or(*low);
        let Some(lp) = st.ledger.get_mut(tp) else {
            continue;
        };
        if lp.written.is_some_and(|w| w >= *high) {
            continue;
        }
        let first = *lp.first.get_or_insert(*low);
        writes.push((tp.clone(), lp.prior.bumped(first, *high).trimmed(committed)));
    }
    drop(st);
    if suspect && let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
        tracing::debug!(consumer = %shared.label, error = %e, "nothing committed before a suspect");
    }
    let written = if writes.is_empty() {
        Ok(())
    } else {
        ledger.write(&writes)
    };
    let mut st = shared.lock();
    match written {
        Ok(()) => {
            for (tp, (_, high)) in &span {
                if let Some(lp) = st.ledger.get_mut(tp) {
                    lp.written = Some(lp.written.map_or(*high, |w| w.max(*high)));
                }
            }
            shared.send(&mut st, pending);
        }
        Err(e) => {
            tracing::warn!(consumer = %shared.label, error = %e, "delivery ledger not written: the records wait");
            let mut lowest: BTreeMap<Tp, (i64, u64)> = BTreeMap::new();
            for Fetched { record, generation } in pending {
                st.out = st.out.saturating_sub(1);
                st.clear_suspect(&record.tp(), record.offset);
                let e = lowest
                    .entry(record.tp())
                    .or_insert((record.offset, generation));
                e.0 = e.0.min(record.offset);
            }
            for (tp, (offset, generation)) in lowest {
                st.rewinds.push(super::state::Rewind {
                    tp,
                    offset,
                    generation,
                    not_before: Instant::now() + LEDGER_PAUSE,
                });
            }
        }
    }
}

fn on_record(shared: &Shared, record: Record) {
    let mut guard = shared.lock();
    let st = &mut *guard;
    let tp = record.tp();
    if !st.parts.contains_key(&tp) {
        let fresh = shared.fresh(st, &tp.0);
        st.parts.insert(tp.clone(), fresh);
    }
    let part = st.parts.get_mut(&tp).expect("just inserted");
    let not_before = if part.stage {
        due_at(&record.headers)
    } else {
        None
    };
    let hold = !part.held.is_empty()
        || (shared.limits.blocking && part.busy)
        || not_before.is_some_and(|d| d > SystemTime::now())
        || record.suspect()
        || st.suspect_out.is_some()
        || st.suspect_waiting;
    if hold {
        part.held.push_back(Held { record, not_before });
    } else {
        shared.forward(part, &mut st.out, &mut st.pending, record);
    }
}

/// Forward what is due; pause and resume partitions as needed. Returns how long the next poll
/// may wait.
fn release_and_pause(consumer: &BaseConsumer<RebalanceContext>, shared: &Shared) -> Duration {
    let now = SystemTime::now();
    let mut wait = TURN;
    let mut pause = TopicPartitionList::new();
    let mut resume = TopicPartitionList::new();
    {
        let mut guard = shared.lock();
        let st = &mut *guard;
        let due_suspect = |part: &super::state::PartitionState| {
            part.held.front().is_some_and(|head| {
                head.record.suspect()
                    && !(shared.limits.blocking && part.busy)
                    && head.not_before.is_none_or(|nb| nb <= now)
            })
        };
        // A due suspect goes out alone: once nothing else is out, and nothing goes with it.
        let suspect = st
            .parts
            .iter()
            .find(|(_, part)| due_suspect(part))
            .map(|(tp, _)| tp.clone());
        st.suspect_waiting = suspect.is_some();
        if st.suspect_out.is_none() {
            match suspect {
                Some(tp) if st.out == 0 => {
                    let part = st.parts.get_mut(&tp).expect("found above");
                    let held = part.held.pop_front().expect("front exists");
                    st.suspect_out = Some((tp, held.record.offset));
                    st.suspect_waiting = false;
                    shared.forward(part, &mut st.out, &mut st.pending, held.record);
                }
                Some(_) => {}
                None => {
                    for part in st.parts.values_mut() {
                        while let Some(head) = part.held.front() {
                            if (shared.limits.blocking && part.busy) || head.record.suspect() {
                                break;
                            }
                            if let Some(nb) = head.not_before
                                && nb > now
                            {
                                wait = wait.min(nb.duration_since(now).unwrap_or_default());
                                break;
                            }
                            let held = part.held.pop_front().expect("front exists");
                            shared.forward(part, &mut st.out, &mut st.pending, held.record);
                        }
                    }
                }
            }
        }
        for part in st.parts.values() {
            if let Some(nb) = part.held.front().and_then(|h| h.not_before)
                && nb > now
            {
                wait = wait.min(nb.duration_since(now).unwrap_or_default());
            }
        }
        let throttled = st.out >= shared.limits.prefetch;
        for (tp, part) in &mut st.parts {
            let want = throttled || !part.held.is_empty();
            if want != part.paused {
                part.paused = want;
                let list = if want { &mut pause } else { &mut resume };
                let _ = list.add_partition(&tp.0, tp.1);
            }
        }
    }
    if pause.count() > 0
        && let Err(e) = consumer.pause(&pause)
    {
        tracing::debug!(consumer = %shared.label, error = %e, "pause failed");
    }
    if resume.count() > 0
        && let Err(e) = consumer.resume(&resume)
    {
        tracing::debug!(consumer = %shared.label, error = %e, "resume failed");
    }
    wait.max(Duration::from_millis(1))
}

/// Read partitions again from their lowest unsettled record where a delivery was dropped
/// unsettled: a new generation (later settles of the old one store nothing), then a seek.
fn rewind(consumer: &BaseConsumer<RebalanceContext>, shared: &Shared) {
    let now = Instant::now();
    let mut seeks = Vec::new();
    {
        let mut guard = shared.lock();
        let st = &mut *guard;
        if st.rewinds.is_empty() {
            return;
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut st.rewinds)
            .into_iter()
            .partition(|r| r.not_before <= now);
        st.rewinds = later;
        for rw in due {
            let Some(part) = st.parts.get(&rw.tp) else {
                continue;
            };
            if part.generation != rw.generation {
                continue;
            }
            let from = part
                .tracker
                .lowest_unsettled()
                .map_or(rw.offset, |l| l.min(rw.offset));
            let paused = part.paused;
            let mut fresh = shared.fresh(st, &rw.tp.0);
            fresh.paused = paused;
            st.parts.insert(rw.tp.clone(), fresh);
            seeks.push((rw.tp, from));
        }
    }
    for ((topic, partition), from) in seeks {
        tracing::warn!(consumer = %shared.label, topic = %topic, partition, offset = from, "a delivery was left unsettled: reading its partition again from there");
        if let Err(e) = consumer.seek(
            &topic,
            partition,
            Offset::Offset(from),
            Duration::from_secs(5),
        ) {
            tracing::warn!(consumer = %shared.label, error = %e, "seek failed; the partition is read again after the next rebalance");
        }
    }
}
