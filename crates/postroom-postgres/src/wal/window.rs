//! The relay's window: the committed messages read from the slot and not yet confirmed, in
//! the order the log gave them, and the position the slot may advance to.
//!
//! Order: each aggregate has a queue; only its head may be in flight, and only once the
//! previous message of the aggregate was confirmed, so a message whose publish failed goes
//! back to the head of its queue and the later messages of its aggregate wait behind it (they
//! are never confirmed before it). Aggregates are independent: a batch holds the heads of many
//! aggregates, and several batches are in flight at once.
//!
//! Position: the log's transactions are counted in commit order; the slot may advance past a
//! transaction's end once each of its messages, and each message of every earlier
//! transaction, is confirmed.

use super::lsn::Lsn;
use postroom_core::{Error, OutgoingMessage, Result};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// What the window keeps about a message besides the message.
#[derive(Debug)]
pub(crate) struct Meta {
    /// The message's place in the order it was read.
    seq: u64,
    /// Its transaction's number.
    txn: u64,
    /// Its aggregate.
    key: String,
    /// Publishes that failed so far.
    pub attempts: u32,
    /// The outbox row's `seq`, for a message read from the table.
    row_seq: Option<i64>,
}

/// Messages to publish together: heads of distinct aggregates.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub metas: Vec<Meta>,
    pub messages: Vec<OutgoingMessage>,
}

#[derive(Debug)]
struct Txn {
    end_lsn: Lsn,
    commit_time: i64,
    remaining: usize,
}

#[derive(Debug, Default)]
struct Aggregate {
    queue: VecDeque<(Meta, OutgoingMessage)>,
    in_flight: bool,
}

/// What settling a batch did.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    pub published: usize,
    pub failed: usize,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Window {
    next_seq: u64,
    base_txn: u64,
    txns: VecDeque<Txn>,
    aggregates: HashMap<String, Aggregate>,
    /// Aggregates whose head may be sent now, by the head's `seq`.
    ready: BTreeMap<u64, String>,
    /// Aggregates whose head waits to be tried again, by when.
    delayed: BTreeMap<(Instant, u64), String>,
    held: usize,
    confirmed: Lsn,
    unconfirmed_rows: BTreeMap<i64, u32>,
    max_row_seq: Option<i64>,
}

impl Window {
    /// An empty window whose slot stands at `confirmed`.
    pub fn new(confirmed: Lsn) -> Self {
        Self {
            confirmed,
            ..Self::default()
        }
    }

    /// Take in a committed transaction (its end, its commit time, its messages in order,
    /// each with its outbox row's `seq` when it came from the table).
    pub fn push_txn(
        &mut self,
        end_lsn: Lsn,
        commit_time: i64,
        messages: Vec<(Option<i64>, OutgoingMessage)>,
    ) {
        let txn = self.base_txn + self.txns.len() as u64;
        self.txns.push_back(Txn {
            end_lsn,
            commit_time,
            remaining: messages.len(),
        });
        for (row_seq, msg) in messages {
            let seq = self.next_seq;
            self.next_seq += 1;
            let key = msg.aggregate_key();
            if let Some(r) = row_seq {
                *self.unconfirmed_rows.entry(r).or_default() += 1;
                self.max_row_seq = self.max_row_seq.max(Some(r));
            }
            let agg = self.aggregates.entry(key.clone()).or_default();
            if agg.queue.is_empty() && !agg.in_flight {
                self.ready.insert(seq, key.clone());
            }
            agg.queue.push_back((
                Meta {
                    seq,
                    txn,
                    key,
                    attempts: 0,
                    row_seq,
                },
                msg,
            ));
            self.held += 1;
        }
        self.advance();
    }

    /// Up to `limit` messages to publish now, heads of distinct aggregates in log order;
    /// `None` when none may go.
    pub fn next_batch(&mut self, limit: usize, now: Instant) -> Option<Batch> {
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            if let Some(head) = self.aggregates.get(&key).and_then(|a| a.queue.front()) {
                self.ready.insert(head.0.seq, key);
            }
        }
        let mut batch = Batch::default();
        while batch.messages.len() < limit {
            let Some((_, key)) = self.ready.pop_first() else {
                break;
            };
            let Some(agg) = self.aggregates.get_mut(&key) else {
                continue;
            };
            let Some((meta, msg)) = agg.queue.pop_front() else {
                continue;
            };
            agg.in_flight = true;
            batch.metas.push(meta);
            batch.messages.push(msg);
        }
        (!batch.messages.is_empty()).then_some(batch)
    }

    /// Take in the results of `batch` (one per message, in order): a confirmed message is
    /// done, and its aggregate's next message may go; a failed one goes back to the head of
    /// its aggregate, to be tried again after `delay(attempts, error)`.
    pub fn settle(
        &mut self,
        batch: Batch,
        results: Vec<Result<()>>,
        now: Instant,
        delay: impl Fn(u32, &Error) -> Duration,
    ) -> Settled {
        let mut settled = Settled::default();
        let mut results = results.into_iter();
        for (mut meta, msg) in batch.metas.into_iter().zip(batch.messages) {
            let result = results.next().unwrap_or_else(|| {
                Err(Error::new(
                    postroom_core::ErrorKind::Io,
                    "the publisher gave no result for this message",
                ))
            });
            let key = meta.key.clone();
            let Some(agg) = self.aggregates.get_mut(&key) else {
                continue;
            };
            agg.in_flight = false;
            match result {
                Ok(()) => {
                    settled.published += 1;
                    self.held -= 1;
                    if let Some(t) = meta
                        .txn
                        .checked_sub(self.base_txn)
                        .and_then(|i| self.txns.get_mut(usize::try_from(i).ok()?))
                    {
                        t.remaining = t.remaining.saturating_sub(1);
                    }
                    if let Some(r) = meta.row_seq
                        && let Some(n) = self.unconfirmed_rows.get_mut(&r)
                    {
                        *n -= 1;
                        if *n == 0 {
                            self.unconfirmed_rows.remove(&r);
                        }
                    }
                    match agg.queue.front() {
                        Some((next, _)) => {
                            self.ready.insert(next.seq, key);
                        }
                        None => {
                            self.aggregates.remove(&key);
                        }
                    }
                }
                Err(e) => {
                    settled.failed += 1;
                    let wait = delay(meta.attempts, &e);
                    meta.attempts = meta.attempts.saturating_add(1);
                    let seq = meta.seq;
                    agg.queue.push_front((meta, msg));
                    self.delayed.insert((now + wait, seq), key);
                }
            }
        }
        self.advance();
        settled
    }

    fn advance(&mut self) {
        while self.txns.front().is_some_and(|t| t.remaining == 0) {
            if let Some(t) = self.txns.pop_front() {
                self.confirmed = self.confirmed.max(t.end_lsn);
                self.base_txn += 1;
            }
        }
    }

    /// The server has sent everything before `lsn`, and the stream is between transactions:
    /// with nothing held, the slot may advance there (past log of no interest to the relay).
    pub fn passed(&mut self, lsn: Lsn) {
        if self.txns.is_empty() {
            self.confirmed = self.confirmed.max(lsn);
        }
    }

    /// How far the slot may advance.
    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// Messages read and not yet confirmed.
    pub fn held(&self) -> usize {
        self.held
    }

    /// When the earliest delayed message may be tried again.
    pub fn next_retry(&self) -> Option<Instant> {
        self.delayed.first_key_value().map(|((at, _), _)| *at)
    }

    /// The commit time of the oldest transaction not yet wholly confirmed.
    pub fn oldest_commit_time(&self) -> Option<i64> {
        self.txns.front().map(|t| t.commit_time)
    }

    /// The highest outbox `seq` such that no row at or below it that the window read is
    /// unconfirmed (`None` before any row was read).
    pub fn published_row_seq(&self) -> Option<i64> {
        match self.unconfirmed_rows.first_key_value() {
            Some((lowest, _)) => Some(lowest - 1),
            None => self.max_row_seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::{Envelope, ErrorKind};

    fn msg(agg: &str, v: u64) -> (Option<i64>, OutgoingMessage) {
        let env = Envelope::builder("t", "p").aggregate("o", agg, v).build();
        (Some(v as i64), OutgoingMessage::from_envelope(&env, "t"))
    }

    fn ok(n: usize) -> Vec<Result<()>> {
        (0..n).map(|_| Ok(())).collect()
    }

    #[test]
    fn a_failed_head_holds_its_aggregate_and_the_position_but_not_the_others() {
        let now = Instant::now();
        let mut w = Window::new(Lsn(10));
        w.push_txn(Lsn(100), 0, vec![msg("a", 1), msg("b", 1), msg("a", 2)]);
        w.push_txn(Lsn(200), 0, vec![msg("b", 2)]);
        // One head per aggregate: a1 and b1, not a2.
        let first = w.next_batch(10, now).unwrap();
        assert_eq!(first.messages.len(), 2);
        assert!(
            w.next_batch(10, now).is_none(),
            "a2 and b2 wait for their heads"
        );
        let results = vec![Err(Error::new(ErrorKind::Nacked, "no")), Ok(())];
        let s = w.settle(first, results, now, |_, _| Duration::from_secs(1));
        assert_eq!((s.published, s.failed), (1, 1));
        assert_eq!(
            w.confirmed(),
            Lsn(10),
            "a1 is not confirmed: the slot stays"
        );
        // b2 may go now; a1 waits for its retry, and a2 behind it.
        let second = w.next_batch(10, now).unwrap();
        assert_eq!(second.messages.len(), 1);
        assert_eq!(second.messages[0].aggregate_key(), "o:b");
        w.settle(second, ok(1), now, |_, _| Duration::ZERO);
        assert_eq!(
            w.confirmed(),
            Lsn(10),
            "b2 confirmed, but a1 of an earlier transaction is not"
        );
        assert!(w.next_batch(10, now).is_none());
        let later = now + Duration::from_secs(2);
        let retry = w.next_batch(10, later).unwrap();
        assert_eq!(retry.metas[0].attempts, 1);
        assert_eq!(
            retry.messages.len(),
            1,
            "a1 alone: a2 still waits behind it"
        );
        w.settle(retry, ok(1), later, |_, _| Duration::ZERO);
        assert_eq!(
            w.confirmed(),
            Lsn(10),
            "a2 of the first transaction is still out"
        );
        let last = w.next_batch(10, later).unwrap();
        w.settle(last, ok(1), later, |_, _| Duration::ZERO);
        assert_eq!(w.confirmed(), Lsn(200));
        assert_eq!(w.held(), 0);
        assert_eq!(w.published_row_seq(), Some(2));
    }

    #[test]
    fn log_between_transactions_is_passed_only_when_nothing_is_held() {
        let mut w = Window::new(Lsn(1));
        w.passed(Lsn(50));
        assert_eq!(w.confirmed(), Lsn(50));
        w.push_txn(Lsn(60), 0, vec![msg("a", 1)]);
        w.passed(Lsn(90));
        assert_eq!(w.confirmed(), Lsn(50));
        w.push_txn(Lsn(70), 0, vec![]);
        assert_eq!(
            w.confirmed(),
            Lsn(50),
            "an empty transaction after a held one waits too"
        );
    }
}
