//! Delivery counts of one partition's records, as the delivery ledger keeps them: ranges of
//! offsets with how many times each was handed to a consumer loop without being committed
//! (`10-14:1,15:3`). A record's delivery number is its count before this session plus one.

use std::fmt;

/// Longest encoded value written (ranges beyond it are merged into their neighbours' counts
/// rather than dropped, so a count never goes down by truncation).
const MAX_RANGES: usize = 256;

/// Offset ranges `[from, to]` (inclusive, ascending, disjoint) with a delivery count each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    ranges: Vec<(i64, i64, u32)>,
}

impl Marks {
    /// How many times the record at `offset` was handed out without being committed.
    pub(crate) fn count(&self, offset: i64) -> u32 {
        self.ranges
            .iter()
            .find(|(from, to, _)| *from <= offset && offset <= *to)
            .map_or(0, |r| r.2)
    }

    /// These counts with every offset of `[from, to]` handed out once more.
    pub(crate) fn bumped(&self, from: i64, to: i64) -> Self {
        let mut cuts: Vec<i64> = vec![from, to + 1];
        for (f, t, _) in &self.ranges {
            cuts.push(*f);
            cuts.push(t + 1);
        }
        cuts.sort_unstable();
        cuts.dedup();
        let mut out: Vec<(i64, i64, u32)> = Vec::new();
        for w in cuts.windows(2) {
            let (f, t) = (w[0], w[1] - 1);
            let inside = from <= f && t <= to;
            let before = self
                .ranges
                .iter()
                .find(|(rf, rt, _)| *rf <= f && t <= *rt)
                .map(|r| r.2);
            let n = match (before, inside) {
                (Some(n), true) => n.saturating_add(1),
                (None, true) => 1,
                (Some(n), false) => n,
                (None, false) => continue,
            };
            match out.last_mut() {
                Some(last) if last.1 + 1 == f && last.2 == n => last.1 = t,
                _ => out.push((f, t, n)),
            }
        }
        let mut marks = Self { ranges: out };
        marks.bound();
        marks
    }

    /// These counts without the offsets below `committed` (they will not be read again).
    pub(crate) fn trimmed(&self, committed: i64) -> Self {
        Self {
            ranges: self
                .ranges
                .iter()
                .filter(|r| r.1 >= committed)
                .map(|&(f, t, n)| (f.max(committed), t, n))
                .collect(),
        }
    }

    /// Merge neighbouring ranges (keeping the higher count) until at most [`MAX_RANGES`] remain.
    fn bound(&mut self) {
        while self.ranges.len() > MAX_RANGES {
            let (f, _, a) = self.ranges[0];
            let (_, t, b) = self.ranges[1];
            self.ranges.splice(0..2, [(f, t, a.max(b))]);
        }
    }

    /// Parse a ledger value; `None` when it is not one (a value written by something else is
    /// ignored, never trusted).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut ranges = Vec::new();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let (span, n) = part.split_once(':')?;
            let (from, to) = match span.split_once('-') {
                Some((f, t)) => (f.parse().ok()?, t.parse().ok()?),
                None => {
                    let o = span.parse().ok()?;
                    (o, o)
                }
            };
            if from > to || from < 0 {
                return None;
            }
            ranges.push((from, to, n.parse().ok()?));
        }
        ranges.sort_unstable();
        if ranges.windows(2).any(|w| w[0].1 >= w[1].0) {
            return None;
        }
        let mut marks = Self { ranges };
        marks.bound();
        Some(marks)
    }
}

impl fmt::Display for Marks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (from, to, n)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if from == to {
                write!(f, "{from}:{n}")?;
            } else {
                write!(f, "{from}-{to}:{n}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_session_adds_one_to_what_it_handed_out() {
        let m = Marks::default().bumped(10, 14);
        assert_eq!(m.to_string(), "10-14:1");
        let m = m.bumped(12, 20);
        assert_eq!(m.to_string(), "10-11:1,12-14:2,15-20:1");
        assert_eq!((m.count(9), m.count(13), m.count(20)), (0, 2, 1));
        assert_eq!(m.trimmed(13).to_string(), "13-14:2,15-20:1");
        assert_eq!(Marks::parse(&m.to_string()), Some(m));
    }

    #[test]
    fn foreign_values_are_not_trusted() {
        for bad in ["x", "1-2", "5-3:1", "1-4:1,3:2", "-1:2", "1:-1"] {
            assert_eq!(Marks::parse(bad), None, "{bad}");
        }
        assert_eq!(Marks::parse(""), Some(Marks::default()));
    }

    proptest::proptest! {
        /// Bumping sessions in any order counts, per offset, the sessions that covered it.
        #[test]
        fn counts_are_the_covering_sessions(sessions in proptest::collection::vec((0i64..40, 0i64..10), 1..12)) {
            let mut m = Marks::default();
            for (from, len) in &sessions {
                m = m.bumped(*from, from + len);
                prop_assert_eq!(Marks::parse(&m.to_string()), Some(m.clone()));
            }
            for o in 0..60 {
                let want = sessions.iter().filter(|(f, l)| *f <= o && o <= f + l).count() as u32;
                prop_assert_eq!(m.count(o), want);
            }
        }
    }
}
