//! The poll thread of one consumer: the only caller of `poll`, so rebalance callbacks run
//! here. Each turn it performs the rewinds deliveries asked for, releases held records that are
//! due (a retry copy is never handed out before its due time) while fewer than `prefetch` are
//! out, pauses the partitions whose head record is not due yet (and all of them while the
//! records read ahead reach their bound) and resumes the others, polls what is buffered,
//! writes to the delivery ledger that the records released are handed out, then hands them
//! out; and commits stored offsets every commit interval. A record the ledger counts as handed
//! out before (a suspect: the consumer died or lost the partition while it was out) is handed
//! out alone.
//!
//! Records polled while `prefetch` records are out are read ahead: held in order behind their
//! partition's earlier records and released as deliveries settle. The prefetch bound is not
//! kept by pausing partitions, because librdkafka drops what it fetched for a partition when
//! it is paused and fetches it again on resume: a consumer that paused at every full window
//! spent its time refetching. While the window is full the thread waits for it to drain to
//! half (or a turn to end) and then releases a half-window at once, so the delivery ledger is
//! written once per half-window rather than once per record.

use super::context::RebalanceContext;
use super::ledger::Ledger;
use super::record::{Fetched, Held, Record, Tp};
use super::state::{LedgerPart, Shared};
use super::topics::Topics;
use crate::headers::due_at;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Longest wait of one poll.
const TURN: Duration = Duration::from_millis(50);

/// Records read ahead (polled, not handed out yet) beyond which every partition is paused,
/// for a consumer with `prefetch`; reading resumes once they are down to half.
fn read_ahead(prefetch: usize) -> usize {
    prefetch.saturating_mul(8).max(256)
}

/// How long a partition waits before it is read again when the ledger could not be read or
/// written.
const LEDGER_PAUSE: Duration = Duration::from_secs(1);

/// Run until the shared stop flag is set; then commit what is stored and close the consumer
/// (leaving the group, so its partitions move at once).
pub(crate) fn run(
    consumer: Arc<BaseConsumer<RebalanceContext>>,
    mut topics: Topics,
    shared: Arc<Shared>,
    commit_every: Duration,
    mut ledger: Option<Ledger>,
) {
    let mut last_commit = Instant::now();
    let prefetch = shared.limits.prefetch;
    let ahead = read_ahead(prefetch);
    while !shared.stopping() {
        topics.refresh(&consumer, &shared.label);
        wait_for_room(&shared, prefetch);
        rewind(&consumer, &shared);
        let wait = release_and_pause(&consumer, &shared, ahead);
        let (budget, first_wait) = {
            let st = shared.lock();
            let held: usize = st.parts.values().map(|p| p.held.len()).sum();
            // Records released this turn go out before the thread waits for more.
            let first_wait = if st.pending.is_empty() {
                wait
            } else {
                Duration::ZERO
            };
            (ahead.saturating_sub(held).max(1), first_wait)
        };
        for i in 0..budget {
            match consumer.poll(if i == 0 { first_wait } else { Duration::ZERO }) {
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

/// While the prefetch window is full and records wait to be handed out, wait (at most a
/// turn) until it drained to half: the next turn then releases a half-window at once.
fn wait_for_room(shared: &Shared, prefetch: usize) {
    let low = prefetch / 2;
    let st = shared.lock();
    let waiting = st.out >= prefetch && st.parts.values().any(|p| !p.held.is_empty());
    if !waiting {
        return;
    }
    let _unused = shared
        .settled
        .wait_timeout_while(st, TURN, |st| st.out > low && !shared.stopping())
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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
        || st.suspect_waiting
        || st.out >= shared.limits.prefetch;
    if hold {
        part.held.push_back(Held { record, not_before });
    } else {
        shared.forward(part, &mut st.out, &mut st.pending, record);
    }
}

/// Forward what is due while fewer than `prefetch` records are out, a partition at a time in
/// turn; pause and resume partitions as needed (`ahead`: the read-ahead bound). Returns how
/// long the next poll may wait.
fn release_and_pause(
    consumer: &BaseConsumer<RebalanceContext>,
    shared: &Shared,
    ahead: usize,
) -> Duration {
    let now = SystemTime::now();
    let prefetch = shared.limits.prefetch;
    let blocking = shared.limits.blocking;
    let mut wait = TURN;
    let mut pause = TopicPartitionList::new();
    let mut resume = TopicPartitionList::new();
    {
        let mut guard = shared.lock();
        let st = &mut *guard;
        let due_suspect = |part: &super::state::PartitionState| {
            part.held.front().is_some_and(|head| {
                head.record.suspect()
                    && !(blocking && part.busy)
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
                None => loop {
                    let mut moved = false;
                    for part in st.parts.values_mut() {
                        if st.out >= prefetch {
                            break;
                        }
                        let Some(head) = part.held.front() else {
                            continue;
                        };
                        if (blocking && part.busy)
                            || head.record.suspect()
                            || head.not_before.is_some_and(|nb| nb > now)
                        {
                            continue;
                        }
                        let held = part.held.pop_front().expect("front exists");
                        shared.forward(part, &mut st.out, &mut st.pending, held.record);
                        moved = true;
                    }
                    if !moved || st.out >= prefetch {
                        break;
                    }
                },
            }
        }
        let mut held = 0;
        for part in st.parts.values() {
            held += part.held.len();
            if let Some(nb) = part.held.front().and_then(|h| h.not_before)
                && nb > now
            {
                wait = wait.min(nb.duration_since(now).unwrap_or_default());
            }
        }
        if held >= ahead {
            st.read_ahead_full = true;
        } else if held <= ahead / 2 {
            st.read_ahead_full = false;
        }
        let full = st.read_ahead_full;
        for (tp, part) in &mut st.parts {
            let not_due = part
                .held
                .front()
                .is_some_and(|h| h.not_before.is_some_and(|nb| nb > now));
            let want = full || not_due;
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
