//! Per-key ordered retry: once a key has a record in the retry path, later records of that key
//! follow it there, in order, instead of overtaking it; other keys keep flowing.
//!
//! Per key, the chain lists the records of that key in the retry path, oldest first, with the
//! stage each waits in. A new record of a key with a chain is not handled: it is sent to the
//! stage its predecessor waits in and joins the chain. A copy that comes due while a record
//! ahead of it in its chain is unresolved moves to that record's stage, behind it. A record
//! leaves the chain when it is acknowledged or parked. One record of a key is out at a time, so
//! the chain is always up to date when the next record of the key is looked at.

use super::record::Fetched;
use postroom_core::MessageId;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Link {
    id: MessageId,
    stage: usize,
}

#[derive(Debug, Default)]
struct Inner {
    links: HashMap<String, VecDeque<Link>>,
    busy: HashSet<String>,
    waiting: HashMap<String, VecDeque<Fetched>>,
    ready: VecDeque<String>,
}

/// What to do with a record of a key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Hand it to the consumer loop.
    Handle,
    /// Send it to this stage, behind the records of its key ahead of it.
    Follow(usize),
    /// Another record of the key is out: it waits.
    Wait,
}

/// The chains of one consumer.
#[derive(Debug, Default)]
pub(crate) struct Chains(Mutex<Inner>);

impl Chains {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Decide for a record of `key` with `id` (`from_stage`: it is a retry copy); a record to
    /// handle marks the key busy; one that waits is kept until the key is free.
    pub(crate) fn route(
        &self,
        key: &str,
        id: MessageId,
        from_stage: bool,
        f: Fetched,
    ) -> (Route, Option<Fetched>) {
        let mut g = self.lock();
        if g.busy.contains(key) {
            g.waiting.entry(key.to_string()).or_default().push_back(f);
            return (Route::Wait, None);
        }
        let chain = g.links.get(key);
        let route = match chain {
            None => Route::Handle,
            Some(c) => match c.iter().position(|l| l.id == id) {
                // A copy whose predecessor in the chain is unresolved goes behind it.
                Some(pos) if pos > 0 => Route::Follow(c[pos - 1].stage),
                Some(_) => Route::Handle,
                // A copy unknown to the chain (after a restart) is handled; a new record of a
                // key with a chain follows its tail.
                None if from_stage => Route::Handle,
                None => Route::Follow(c.back().map_or(0, |l| l.stage)),
            },
        };
        g.busy.insert(key.to_string());
        (route, Some(f))
    }

    /// `id` of `key` now waits in `stage` (a retry, a follow, a move).
    pub(crate) fn placed(&self, key: &str, id: MessageId, stage: usize) {
        let mut g = self.lock();
        let chain = g.links.entry(key.to_string()).or_default();
        match chain.iter_mut().find(|l| l.id == id) {
            Some(l) => l.stage = stage,
            None => chain.push_back(Link { id, stage }),
        }
    }

    /// `id` of `key` was acknowledged or parked: it leaves the chain.
    pub(crate) fn resolved(&self, key: &str, id: MessageId) {
        let mut g = self.lock();
        if let Some(chain) = g.links.get_mut(key) {
            chain.retain(|l| l.id != id);
            if chain.is_empty() {
                g.links.remove(key);
            }
        }
    }

    /// The record of `key` that was out is settled (or abandoned): the next one may go.
    pub(crate) fn release(&self, key: &str) {
        let mut g = self.lock();
        g.busy.remove(key);
        if g.waiting.get(key).is_some_and(|w| !w.is_empty()) {
            g.ready.push_back(key.to_string());
        }
    }

    /// A waiting record whose key is free now.
    pub(crate) fn next_ready(&self) -> Option<Fetched> {
        let mut g = self.lock();
        while let Some(key) = g.ready.pop_front() {
            let Some(queue) = g.waiting.get_mut(&key) else {
                continue;
            };
            let f = queue.pop_front();
            if queue.is_empty() {
                g.waiting.remove(&key);
            }
            if f.is_some() {
                return f;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::record::Record;

    fn fetched(id: MessageId) -> Fetched {
        Fetched {
            record: Record {
                topic: "t".into(),
                partition: 0,
                offset: 0,
                key: Some("k".into()),
                id: Some(id),
                headers: Default::default(),
                body: Vec::new(),
                deliveries: 0,
            },
            generation: 1,
        }
    }

    /// Route `id` of key `k` (`from_stage`: a retry copy) expecting `expected`, then place it
    /// in `stage` and free the key.
    fn into_stage(c: &Chains, id: MessageId, from_stage: bool, expected: Route, stage: usize) {
        assert_eq!(
            c.route("k", id, from_stage, fetched(id)).0,
            expected,
            "{id} on its way to stage {stage}"
        );
        c.placed("k", id, stage);
        c.release("k");
    }

    #[test]
    fn later_records_follow_the_retried_one_and_never_overtake_it() {
        let c = Chains::default();
        let (x, y) = (MessageId::new(), MessageId::new());
        into_stage(&c, x, false, Route::Handle, 0);
        // y follows x into stage 0.
        into_stage(&c, y, false, Route::Follow(0), 0);
        // x comes due, fails again, goes to stage 1; y moves behind it.
        into_stage(&c, x, true, Route::Handle, 1);
        into_stage(&c, y, true, Route::Follow(1), 1);
        assert_eq!(c.route("k", x, true, fetched(x)).0, Route::Handle);
        c.resolved("k", x);
        c.release("k");
        assert_eq!(
            c.route("k", y, true, fetched(y)).0,
            Route::Handle,
            "y is the head now"
        );
        assert_eq!(
            c.route("other", MessageId::new(), false, fetched(x)).0,
            Route::Handle,
            "other keys flow"
        );
    }

    #[test]
    fn a_second_record_of_a_busy_key_waits_for_it() {
        let c = Chains::default();
        let (x, y) = (MessageId::new(), MessageId::new());
        assert_eq!(c.route("k", x, false, fetched(x)).0, Route::Handle);
        assert_eq!(c.route("k", y, false, fetched(y)).0, Route::Wait);
        assert!(c.next_ready().is_none());
        c.release("k");
        assert_eq!(c.next_ready().and_then(|f| f.record.id), Some(y));
    }
}
