//! The offset tracker of one partition: records of a partition may finish out of order (keys
//! run in parallel), but an offset may be stored only once the record **and every earlier
//! record of its partition** are settled. The tracker keeps the unsettled offsets; what may be
//! stored is the lowest of them, or the next offset after everything seen when none is left.

use std::collections::BTreeSet;

/// Unsettled offsets of one partition and the offset that may be committed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffsetTracker {
    unsettled: BTreeSet<i64>,
    /// One past the highest offset begun.
    next: Option<i64>,
    /// The last offset handed to the store (the next record to read after a restart).
    stored: Option<i64>,
}

impl OffsetTracker {
    /// A tracker with nothing seen.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A record at `offset` was handed out.
    pub fn begin(&mut self, offset: i64) {
        // Where reading began is where a restart would begin anyway: nothing to store yet.
        self.stored.get_or_insert(offset);
        self.unsettled.insert(offset);
        self.next = Some(self.next.map_or(offset + 1, |n| n.max(offset + 1)));
    }

    /// The record at `offset` was settled. Returns the offset to store now (the next record to
    /// read after a restart), when it moved forward.
    pub fn finish(&mut self, offset: i64) -> Option<i64> {
        if !self.unsettled.remove(&offset) {
            return None;
        }
        let committable = self.committable()?;
        if self.stored.is_some_and(|s| s >= committable) {
            return None;
        }
        self.stored = Some(committable);
        Some(committable)
    }

    /// The offset a restart may begin at: the lowest unsettled record, or one past everything
    /// seen.
    #[must_use]
    pub fn committable(&self) -> Option<i64> {
        self.unsettled.first().copied().or(self.next)
    }

    /// The lowest unsettled offset.
    #[must_use]
    pub fn lowest_unsettled(&self) -> Option<i64> {
        self.unsettled.first().copied()
    }

    /// How many records are unsettled.
    #[must_use]
    pub fn unsettled(&self) -> usize {
        self.unsettled.len()
    }

    /// Whether `offset` is unsettled.
    #[must_use]
    pub fn is_unsettled(&self, offset: i64) -> bool {
        self.unsettled.contains(&offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn out_of_order_finishes_store_only_the_contiguous_prefix() {
        let mut t = OffsetTracker::new();
        for o in 10..15 {
            t.begin(o);
        }
        assert_eq!(t.finish(12), None, "10 and 11 are still unsettled");
        assert_eq!(t.finish(11), None);
        assert_eq!(t.finish(10), Some(13), "10..=12 done: restart at 13");
        assert_eq!(t.finish(14), None, "13 still unsettled");
        assert_eq!(t.finish(13), Some(15));
        assert_eq!(t.finish(13), None, "a second settle changes nothing");
    }

    #[test]
    fn nothing_is_stored_past_an_unsettled_record() {
        let mut t = OffsetTracker::new();
        t.begin(0);
        t.begin(1);
        assert_eq!(t.finish(1), None);
        assert_eq!(t.committable(), Some(0));
        assert_eq!(t.lowest_unsettled(), Some(0));
    }

    proptest::proptest! {
        /// In any finishing order, the stored offset never passes an unsettled record, and
        /// ends one past the last record.
        #[test]
        fn stored_never_passes_an_unsettled_record(order in proptest::sample::subsequence((0i64..20).collect::<Vec<_>>(), 20).prop_shuffle()) {
            let mut t = OffsetTracker::new();
            for o in 0..20 { t.begin(o); }
            let mut done = std::collections::BTreeSet::new();
            for o in order {
                done.insert(o);
                if let Some(s) = t.finish(o) {
                    prop_assert!((0..s).all(|x| done.contains(&x)));
                }
            }
            prop_assert_eq!(t.committable(), Some(20));
        }
    }
}
