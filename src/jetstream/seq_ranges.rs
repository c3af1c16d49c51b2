//! Sets of stream sequences kept small: sorted, disjoint, inclusive
//! ranges, so a run of consecutive sequences costs one pair however long
//! it is. The durable advisory totals and the record of a stream's lost
//! sequences use them.

use serde::{Deserialize, Serialize};

/// Sequences of a stream, as sorted, disjoint inclusive ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SeqRanges(Vec<(u64, u64)>);

impl SeqRanges {
    /// True if `seq` is in a range.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        let i = self.0.partition_point(|&(_, end)| end < seq);
        self.0.get(i).is_some_and(|&(start, _)| start <= seq)
    }

    /// Adds `seq`, merging neighbouring ranges.
    pub(crate) fn insert(&mut self, seq: u64) {
        if self.contains(seq) {
            return;
        }
        let i = self.0.partition_point(|&(_, end)| end < seq);
        let joins_left = i > 0 && self.0[i - 1].1 + 1 == seq;
        let joins_right = i < self.0.len() && self.0[i].0 == seq + 1;
        match (joins_left, joins_right) {
            (true, true) => {
                self.0[i - 1].1 = self.0[i].1;
                self.0.remove(i);
            }
            (true, false) => self.0[i - 1].1 = seq,
            (false, true) => self.0[i].0 = seq,
            (false, false) => self.0.insert(i, (seq, seq)),
        }
    }

    /// Covers every sequence from 1 to `floor` with one range, keeping the
    /// ranges above it: at most one range more than the sequences above
    /// the floor need, however long the stream.
    pub(crate) fn cover_through(&mut self, floor: u64) {
        if floor == 0 {
            return;
        }
        self.0.retain(|&(_, end)| end > floor);
        match self.0.first_mut() {
            Some(first) if first.0 <= floor.saturating_add(1) => first.0 = 1,
            _ => self.0.insert(0, (1, floor)),
        }
    }

    /// Forgets every sequence below `first`.
    pub(crate) fn forget_below(&mut self, first: u64) {
        self.0.retain(|&(_, end)| end >= first);
        if let Some(low) = self.0.first_mut() {
            low.0 = low.0.max(first);
        }
    }

    /// Merges the lowest ranges into one until at most `max` are left
    /// (`max` at least 1): the sequences between them then count as in the
    /// set. For a set that must never count a sequence twice, this errs on
    /// the side of not counting.
    pub(crate) fn merge_lowest(&mut self, max: usize) {
        let max = max.max(1);
        if self.0.len() > max {
            let merged = self.0.len() - max;
            let start = self.0[0].0;
            self.0.drain(..merged);
            self.0[0].0 = start;
        }
    }

    /// Number of ranges (the stored size).
    pub(crate) fn ranges(&self) -> usize {
        self.0.len()
    }

    /// Forgets the lowest ranges beyond `max`.
    pub(crate) fn keep_highest(&mut self, max: usize) {
        if self.0.len() > max {
            let excess = self.0.len() - max;
            self.0.drain(..excess);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_prune() {
        let mut r = SeqRanges::default();
        for s in [5, 7, 6, 1, 3, 2, 10] {
            r.insert(s);
        }
        assert_eq!(r.0, vec![(1, 3), (5, 7), (10, 10)]);
        assert!(r.contains(6) && r.contains(10) && !r.contains(4) && !r.contains(11));
        r.cover_through(5);
        assert_eq!(r.0, vec![(1, 7), (10, 10)]);
        assert!(r.contains(4), "acknowledged: handled, even if never marked");
        r.cover_through(10);
        assert_eq!(r.0, vec![(1, 10)]);
        r.cover_through(20);
        assert_eq!(r.0, vec![(1, 20)]);
        let mut gap = SeqRanges::default();
        gap.insert(30);
        gap.cover_through(20);
        assert_eq!(gap.0, vec![(1, 20), (30, 30)]);
        assert!(gap.contains(20) && !gap.contains(21) && gap.contains(30));
        gap.cover_through(0);
        assert_eq!(gap.ranges(), 2);
        gap.forget_below(25);
        assert_eq!(gap.0, vec![(30, 30)]);
        let mut cut = SeqRanges::default();
        for s in [3, 4, 5, 9] {
            cut.insert(s);
        }
        cut.forget_below(4);
        assert_eq!(cut.0, vec![(4, 5), (9, 9)]);
        cut.insert(20);
        cut.merge_lowest(2);
        assert_eq!(cut.0, vec![(4, 9), (20, 20)]);
        cut.merge_lowest(0);
        assert_eq!(cut.0, vec![(4, 20)]);
        cut.keep_highest(0);
        assert_eq!(cut.ranges(), 0);
    }
}
