//! When did the stream store sequence N? `/jsz` gives, per poll, the first
//! and last sequence of each stream and when each was stored; kept across
//! polls these (sequence, time) points bracket any sequence in between.
//! A poll's own clock adds a bound: what came after its last sequence was
//! stored after it, however long the stream had been idle.

/// Points kept per stream: enough to bracket a backlog finely, few enough
/// that 10,000 streams stay small (24 bytes a point).
pub(crate) const MAX_POINTS: usize = 64;

/// One known sequence of a stream.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    seq: u64,
    /// When the stream stored `seq` (Unix seconds, the server's clock).
    ts: f64,
    /// The latest server time at which `seq` was still the stream's last:
    /// every later sequence was stored after it (`ts` where no poll said).
    last_until: f64,
}

/// A stream's known points, ascending in sequence and time.
#[derive(Debug, Default, Clone)]
pub(crate) struct StreamHistory {
    points: Vec<Point>,
    /// When this stream was last seen (the exporter's clock), to forget it.
    pub(crate) seen: f64,
}

impl StreamHistory {
    /// Takes one poll's first and last (sequence, time) points, and the
    /// server's clock at that poll where it gave one (`server_now`: the
    /// last sequence was still the last then).
    ///
    /// A last sequence below one already known means the stream was
    /// recreated (or reset): what was known is about another stream, and is
    /// dropped. Points below `first_seq` are dropped too: no consumer
    /// position below it needs them (the first stored message answers).
    pub(crate) fn record(
        &mut self,
        first: (u64, Option<f64>),
        last: (u64, Option<f64>),
        (seen, server_now): (f64, Option<f64>),
    ) {
        self.seen = seen;
        if self.points.last().is_some_and(|p| last.0 < p.seq) {
            self.points.clear();
        }
        for ((seq, ts), until) in [(first, None), (last, server_now)] {
            // An empty stream reports sequence 0 or the zero time.
            if let (true, Some(ts)) = (seq > 0, ts) {
                self.insert(seq, ts, until.unwrap_or(ts));
            }
        }
        let keep_from = self.points.partition_point(|p| p.seq < first.0);
        self.points.drain(..keep_from);
        while self.points.len() > MAX_POINTS {
            self.thin();
        }
    }

    fn insert(&mut self, seq: u64, ts: f64, last_until: f64) {
        let mut at = self.points.partition_point(|p| p.seq < seq);
        match self.points.get_mut(at) {
            Some(p) if p.seq == seq => {
                let last_until = if p.ts == ts {
                    last_until.max(p.last_until)
                } else {
                    last_until
                };
                *p = Point {
                    seq,
                    ts,
                    last_until,
                };
            }
            _ => self.points.insert(
                at,
                Point {
                    seq,
                    ts,
                    last_until,
                },
            ),
        }
        // Times rise with sequences; a point that disagrees with the newest
        // reading is stale (a message deleted and its sequence's time
        // unknown, a clock step): the new reading wins.
        while at > 0 && self.points[at - 1].ts > ts {
            self.points.remove(at - 1);
            at -= 1;
        }
        while self.points.get(at + 1).is_some_and(|p| p.ts < ts) {
            self.points.remove(at + 1);
        }
    }

    /// Drops the inner point whose neighbours are closest in time, so the
    /// points left stay spread evenly over the stream's time span.
    fn thin(&mut self) {
        let gap = |i: usize| self.points[i + 1].ts - self.points[i - 1].ts;
        if let Some(i) = (1..self.points.len() - 1).min_by(|&a, &b| gap(a).total_cmp(&gap(b))) {
            self.points.remove(i);
        }
    }

    /// Estimated time (Unix seconds) the stream stored `seq`; `None` with no
    /// points at all.
    ///
    /// How it errs: between two known points the time is interpolated as if
    /// messages arrived at an even rate, but never before the last moment a
    /// poll saw the lower point as the stream's last (after an idle stream,
    /// traffic resumed no earlier). The true time lies between that and the
    /// upper point's time, so the error is at most their distance: small
    /// when polls are frequent compared with how fast the traffic changes.
    /// Below the first point the first point's time is given (only deleted
    /// messages lie below it); above the last, the last moment the last
    /// point was seen as last (a message stored later: age overestimated by
    /// at most the time since that poll).
    pub(crate) fn estimate(&self, seq: u64) -> Option<f64> {
        let first = *self.points.first()?;
        let last = *self.points.last()?;
        if seq <= first.seq {
            return Some(first.ts);
        }
        if seq > last.seq {
            return Some(last.ts.max(last.last_until));
        }
        let hi = self.points.partition_point(|p| p.seq < seq);
        let p1 = self.points[hi];
        if p1.seq == seq {
            return Some(p1.ts);
        }
        let p0 = self.points[hi - 1];
        let even = p0.ts + (p1.ts - p0.ts) * (seq - p0.seq) as f64 / (p1.seq - p0.seq) as f64;
        // Never before the bound, which a clock step could put past p1.
        Some(even.max(p0.last_until.min(p1.ts)))
    }

    /// The points, for tests.
    #[cfg(test)]
    pub(crate) fn points(&self) -> Vec<(u64, f64)> {
        self.points.iter().map(|p| (p.seq, p.ts)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_polls_and_clamps_outside() {
        let mut h = StreamHistory::default();
        assert_eq!(h.estimate(5), None);
        h.record((1, Some(100.0)), (11, Some(110.0)), (110.0, None));
        h.record((1, Some(100.0)), (31, Some(150.0)), (150.0, None));
        assert_eq!(h.points(), &[(1, 100.0), (11, 110.0), (31, 150.0)]);
        assert_eq!(h.estimate(1), Some(100.0));
        assert_eq!(h.estimate(6), Some(105.0));
        assert_eq!(h.estimate(11), Some(110.0));
        assert_eq!(h.estimate(21), Some(130.0));
        assert_eq!(h.estimate(99), Some(150.0));
        // Messages below 21 expired: older points go, the first stays exact.
        h.record((21, Some(131.0)), (31, Some(150.0)), (160.0, None));
        assert_eq!(h.points(), &[(21, 131.0), (31, 150.0)]);
        assert_eq!(h.estimate(3), Some(131.0));
        // Recreated: sequences start again.
        h.record((1, Some(200.0)), (2, Some(201.0)), (201.0, None));
        assert_eq!(h.points(), &[(1, 200.0), (2, 201.0)]);
        // An empty stream adds nothing.
        let mut empty = StreamHistory::default();
        empty.record((0, None), (0, None), (1.0, None));
        assert_eq!(empty.estimate(1), None);
    }

    #[test]
    fn traffic_after_an_idle_stream_is_placed_after_the_poll_that_saw_it_idle() {
        let mut h = StreamHistory::default();
        // 5 messages at 100, then idle: a poll at 110 still sees 5 as last.
        h.record((1, Some(99.0)), (5, Some(100.0)), (110.0, Some(110.0)));
        assert_eq!(h.estimate(6), Some(110.0));
        // Traffic resumed: 9 stored at 111. 6 to 8 came after 110, not
        // spread from 100 (which would put 6 at 102.75, 8 at 108.25).
        h.record((1, Some(99.0)), (9, Some(111.0)), (111.5, Some(111.5)));
        assert_eq!(h.estimate(6), Some(110.0));
        assert_eq!(h.estimate(8), Some(110.0));
        assert_eq!(h.estimate(5), Some(100.0));
        assert_eq!(h.estimate(10), Some(111.5));
        // Steady traffic, polled just after 5: the even rate stands.
        let mut steady = StreamHistory::default();
        steady.record((1, Some(96.0)), (5, Some(100.0)), (100.1, Some(100.1)));
        steady.record((1, Some(96.0)), (10, Some(105.0)), (105.1, Some(105.1)));
        assert_eq!(steady.estimate(8), Some(103.0));
        // Without the server's clock nothing is bounded: as before.
        let mut blind = StreamHistory::default();
        blind.record((1, Some(99.0)), (5, Some(100.0)), (110.0, None));
        blind.record((1, Some(99.0)), (9, Some(111.0)), (111.5, None));
        assert_eq!(blind.estimate(6), Some(102.75));
        // A clock step that puts the bound past the next point: never
        // beyond the next point's time.
        let mut stepped = StreamHistory::default();
        stepped.record((1, Some(99.0)), (5, Some(100.0)), (120.0, Some(120.0)));
        stepped.record((1, Some(99.0)), (9, Some(111.0)), (121.0, Some(121.0)));
        assert_eq!(stepped.estimate(6), Some(111.0));
    }

    #[test]
    fn keeps_a_bounded_even_spread_of_points() {
        let mut h = StreamHistory::default();
        for i in 1..=1000u64 {
            h.record((1, Some(0.0)), (i * 10, Some(i as f64)), (i as f64, None));
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
