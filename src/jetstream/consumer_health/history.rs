//! When did the stream store sequence N? `/jsz` gives, per poll, the first
//! and last sequence of each stream and when each was stored; kept across
//! polls these (sequence, time) points bracket any sequence in between.

/// Points kept per stream: enough to bracket a backlog finely, few enough
/// that 10,000 streams stay small (16 bytes a point).
pub(crate) const MAX_POINTS: usize = 64;

/// A stream's known (sequence, Unix seconds stored) points, ascending in both.
#[derive(Debug, Default, Clone)]
pub(crate) struct StreamHistory {
    points: Vec<(u64, f64)>,
    /// When this stream was last seen (the exporter's clock), to forget it.
    pub(crate) seen: f64,
}

impl StreamHistory {
    /// Takes one poll's first and last (sequence, time) points.
    ///
    /// A last sequence below one already known means the stream was
    /// recreated (or reset): what was known is about another stream, and is
    /// dropped. Points below `first_seq` are dropped too: no consumer
    /// position below it needs them (the first stored message answers).
    pub(crate) fn record(
        &mut self,
        first: (u64, Option<f64>),
        last: (u64, Option<f64>),
        seen: f64,
    ) {
        self.seen = seen;
        if self.points.last().is_some_and(|&(seq, _)| last.0 < seq) {
            self.points.clear();
        }
        for (seq, ts) in [first, last] {
            // An empty stream reports sequence 0 or the zero time.
            if let (true, Some(ts)) = (seq > 0, ts) {
                self.insert(seq, ts);
            }
        }
        let keep_from = self.points.partition_point(|&(seq, _)| seq < first.0);
        self.points.drain(..keep_from);
        while self.points.len() > MAX_POINTS {
            self.thin();
        }
    }

    fn insert(&mut self, seq: u64, ts: f64) {
        let at = self.points.partition_point(|&(s, _)| s < seq);
        if self.points.get(at).is_some_and(|&(s, _)| s == seq) {
            self.points[at].1 = ts;
        } else {
            self.points.insert(at, (seq, ts));
        }
        // Times rise with sequences; a point that disagrees with the newest
        // reading is stale (a message deleted and its sequence's time
        // unknown, a clock step): the new reading wins.
        let mut at = at;
        while at > 0 && self.points[at - 1].1 > ts {
            self.points.remove(at - 1);
            at -= 1;
        }
        while self.points.get(at + 1).is_some_and(|&(_, t)| t < ts) {
            self.points.remove(at + 1);
        }
    }

    /// Drops the inner point whose neighbours are closest in time, so the
    /// points left stay spread evenly over the stream's time span.
    fn thin(&mut self) {
        let gap = |i: usize| self.points[i + 1].1 - self.points[i - 1].1;
        if let Some(i) = (1..self.points.len() - 1).min_by(|&a, &b| gap(a).total_cmp(&gap(b))) {
            self.points.remove(i);
        }
    }

    /// Estimated time (Unix seconds) the stream stored `seq`; `None` with no
    /// points at all.
    ///
    /// How it errs: between two known points the time is interpolated as if
    /// messages arrived at an even rate. The true time lies between the two
    /// points' times (times rise with sequences), so the error is at most
    /// their distance in time: small when polls are frequent compared with
    /// how fast the traffic changes. Below the first point the first point's
    /// time is given (only deleted messages lie below it); above the last,
    /// the last point's time (a message stored later: age overestimated by
    /// at most the time since the last poll's newest message).
    pub(crate) fn estimate(&self, seq: u64) -> Option<f64> {
        let first = *self.points.first()?;
        let last = *self.points.last()?;
        if seq <= first.0 {
            return Some(first.1);
        }
        if seq >= last.0 {
            return Some(last.1);
        }
        let hi = self.points.partition_point(|&(s, _)| s < seq);
        let (s1, t1) = self.points[hi];
        if s1 == seq {
            return Some(t1);
        }
        let (s0, t0) = self.points[hi - 1];
        Some(t0 + (t1 - t0) * (seq - s0) as f64 / (s1 - s0) as f64)
    }

    /// The points, for tests.
    #[cfg(test)]
    pub(crate) fn points(&self) -> &[(u64, f64)] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_polls_and_clamps_outside() {
        let mut h = StreamHistory::default();
        assert_eq!(h.estimate(5), None);
        h.record((1, Some(100.0)), (11, Some(110.0)), 110.0);
        h.record((1, Some(100.0)), (31, Some(150.0)), 150.0);
        assert_eq!(h.points(), &[(1, 100.0), (11, 110.0), (31, 150.0)]);
        assert_eq!(h.estimate(1), Some(100.0));
        assert_eq!(h.estimate(6), Some(105.0));
        assert_eq!(h.estimate(11), Some(110.0));
        assert_eq!(h.estimate(21), Some(130.0));
        assert_eq!(h.estimate(99), Some(150.0));
        // Messages below 21 expired: older points go, the first stays exact.
        h.record((21, Some(131.0)), (31, Some(150.0)), 160.0);
        assert_eq!(h.points(), &[(21, 131.0), (31, 150.0)]);
        assert_eq!(h.estimate(3), Some(131.0));
        // Recreated: sequences start again.
        h.record((1, Some(200.0)), (2, Some(201.0)), 201.0);
        assert_eq!(h.points(), &[(1, 200.0), (2, 201.0)]);
        // An empty stream adds nothing.
        let mut empty = StreamHistory::default();
        empty.record((0, None), (0, None), 1.0);
        assert_eq!(empty.estimate(1), None);
    }

    #[test]
    fn keeps_a_bounded_even_spread_of_points() {
        let mut h = StreamHistory::default();
        for i in 1..=1000u64 {
            h.record((1, Some(0.0)), (i * 10, Some(i as f64)), i as f64);
        }
        assert_eq!(h.points().len(), MAX_POINTS);
        assert_eq!(h.points()[0], (1, 0.0));
        assert_eq!(*h.points().last().unwrap(), (10_000, 1000.0));
        // Spread: no gap between kept points is much wider than the average.
        let widest = h
            .points()
            .windows(2)
            .map(|w| w[1].1 - w[0].1)
            .fold(0.0, f64::max);
        assert!(widest <= 2.0 * 1000.0 / (MAX_POINTS - 1) as f64, "{widest}");
        // Even rate: the estimate is exact anywhere.
        assert_eq!(h.estimate(5_000), Some(500.0));
    }
}
