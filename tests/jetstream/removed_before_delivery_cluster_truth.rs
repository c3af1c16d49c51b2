//! What the cluster test published, deleted and received: the truth every
//! exporter's counters are held to.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What the test published, what the stream holds and what each consumer
/// received.
pub(crate) struct Truth {
    /// Every settling shares this deadline: the whole scenario's bound.
    pub(crate) until: Instant,
    /// The last stream sequence published (sequences start at 1, one publisher).
    pub(crate) last: u64,
    /// The sequences the stream holds.
    pub(crate) stored: BTreeSet<u64>,
    /// What each consumer received.
    pub(crate) received: [BTreeSet<u64>; 2],
    /// A message was deleted from the middle of the stream.
    pub(crate) deleted: bool,
}

impl Truth {
    /// Nothing published yet; the scenario has 120 s from now.
    pub(crate) fn new() -> Truth {
        Truth {
            until: Instant::now() + Duration::from_secs(120),
            last: 0,
            stored: BTreeSet::new(),
            received: Default::default(),
            deleted: false,
        }
    }

    /// The first sequence the stream holds (the next one when empty).
    pub(crate) fn first(&self) -> u64 {
        self.stored.first().copied().unwrap_or(self.last + 1)
    }
    /// Messages the stream no longer holds that consumer `c` never received.
    pub(crate) fn removed(&self, c: usize) -> u64 {
        let gone = (1..=self.last).filter(|s| !self.stored.contains(s));
        gone.filter(|s| !self.received[c].contains(s)).count() as u64
    }
    /// Messages the stream holds above `delivered`.
    pub(crate) fn stored_above(&self, delivered: u64) -> u64 {
        self.stored.range(delivered + 1..).count() as u64
    }
    /// Unread interior deletes above `delivered` for consumer `c` that a
    /// leader's `num_pending` of `pending` hides, counting that many more
    /// than are stored there: nothing shows them to an exporter until the
    /// consumer passes them or they fall below the first sequence.
    pub(crate) fn hidden(&self, c: usize, delivered: u64, pending: u64) -> u64 {
        let first = self.first();
        let unread = (delivered + 1..=self.last)
            .filter(|s| *s > first && !self.stored.contains(s) && !self.received[c].contains(s));
        pending
            .saturating_sub(self.stored_above(delivered))
            .min(unread.count() as u64)
    }
    /// The stream sequence consumer `c` delivered last.
    pub(crate) fn delivered(&self, c: usize) -> u64 {
        self.received[c].last().copied().unwrap_or(0)
    }
}

#[test]
fn a_num_pending_above_what_is_stored_hides_as_many_unread_deletes() {
    let mut truth = Truth::new();
    truth.last = 40;
    truth.stored = [31, 33, 34, 36, 37, 38, 39, 40].into();
    truth.received[0] = [31, 33].into();
    // 32 (below 33) and 35 (above, unread) are deleted; 6 stored above 33.
    assert_eq!(truth.hidden(0, 33, 6), 0);
    assert_eq!(truth.hidden(0, 33, 7), 1);
    assert_eq!(truth.hidden(0, 33, 9), 1);
    assert_eq!(truth.hidden(0, 35, 5), 0);
}
