//! A consumer's recent past: compact snapshots over the status window, and
//! the status rules read from them.
//!
//! Memory is bounded whatever the scrape rate: snapshots closer together
//! than a slice of the window are merged into one entry, which keeps the
//! newest values and remembers what the status rules need to know about
//! every snapshot merged into it (was the backlog ever empty, did it fall,
//! did a position go back, ...). So a consumer holds at most about
//! [`MAX_ENTRIES`] entries, and no event between two kept entries is lost.

use super::Status;

/// Entries per window (besides the anchor and the newest).
pub const SLICES: f64 = 8.0;

/// Most entries a consumer holds: a slice apart over the window, the
/// anchor, the newest.
pub const MAX_ENTRIES: usize = SLICES as usize + 3;

/// One consumer as one poll saw it (leader only).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The poll's clock, Unix seconds.
    pub time: f64,
    /// `delivered.stream_seq`.
    pub delivered: u64,
    /// `delivered.last_active`, Unix seconds; NaN when never.
    pub delivered_active: f64,
    /// `ack_floor.stream_seq`.
    pub ack_floor: u64,
    /// `num_pending`.
    pub pending: u64,
    /// `num_ack_pending`.
    pub ack_pending: u64,
    /// `num_waiting`.
    pub waiting: u64,
}

/// Facts about one or more snapshots, as bits.
const PENDING_ZERO: u8 = 1;
const NOTHING_WAITS: u8 = 2;
const ACK_PENDING_ZERO: u8 = 4;
const PULLS_WAITED: u8 = 8;
const PENDING_FELL: u8 = 16;
const WENT_BACK: u8 = 32;

impl Sample {
    fn facts(&self) -> u8 {
        let mut f = 0;
        if self.pending == 0 {
            f |= PENDING_ZERO;
        }
        if self.pending + self.ack_pending == 0 {
            f |= NOTHING_WAITS;
        }
        if self.ack_pending == 0 {
            f |= ACK_PENDING_ZERO;
        }
        if self.waiting > 0 {
            f |= PULLS_WAITED;
        }
        f
    }
}

/// The newest snapshot merged into an entry, only what the rules compare
/// (48 bytes), its own `own` facts, and `facts` about every snapshot merged
/// into the entry and every step to it from the entry before.
#[derive(Debug, Clone, Copy)]
struct Entry {
    time: f64,
    delivered: u64,
    delivered_active: f64,
    ack_floor: u64,
    pending: u64,
    own: u8,
    facts: u8,
}

impl Entry {
    fn of(s: &Sample) -> Entry {
        Entry {
            time: s.time,
            delivered: s.delivered,
            delivered_active: s.delivered_active,
            ack_floor: s.ack_floor,
            pending: s.pending,
            own: s.facts(),
            facts: s.facts(),
        }
    }

    /// Facts about going from `self` to `next`.
    fn change_to(&self, next: &Entry) -> u8 {
        let mut f = 0;
        if next.pending < self.pending {
            f |= PENDING_FELL;
        }
        if next.delivered < self.delivered || next.ack_floor < self.ack_floor {
            f |= WENT_BACK;
        }
        f
    }

    fn same_delivery(&self, other: &Entry) -> bool {
        self.delivered == other.delivered
            && self.delivered_active.to_bits() == other.delivered_active.to_bits()
    }
}

/// A consumer's entries, oldest first.
#[derive(Debug, Default, Clone)]
pub struct ConsumerWindow {
    entries: std::collections::VecDeque<Entry>,
}

impl ConsumerWindow {
    /// Adds one poll's snapshot and drops what the window no longer needs:
    /// every entry older than the newest one at least `window` old (the anchor).
    pub fn record(&mut self, s: Sample, window: f64) {
        let len = self.entries.len();
        let slice = window / SLICES;
        // The newest entry takes snapshots until it is a slice after the one
        // before it: kept entries are a slice apart, so a window holds at
        // most `MAX_ENTRIES`, allocated once.
        let merge = len >= 2 && self.entries[len - 1].time - self.entries[len - 2].time < slice;
        if len == 0 {
            self.entries.reserve_exact(MAX_ENTRIES);
        }
        let mut new = Entry::of(&s);
        match self.entries.back_mut() {
            Some(newest) if merge => {
                new.facts |= newest.facts | newest.change_to(&new);
                *newest = new;
            }
            Some(newest) => {
                new.facts |= newest.change_to(&new);
                self.entries.push_back(new);
            }
            None => self.entries.push_back(new),
        }
        while self
            .entries
            .get(1)
            .is_some_and(|e| e.time <= s.time - window)
        {
            self.entries.pop_front();
        }
    }

    /// When this consumer was last seen.
    pub fn last_seen(&self) -> Option<f64> {
        Some(self.entries.back()?.time)
    }

    /// Entries held (for tests of the memory bound).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The status at `now` by the rules after `paused` (the caller checks
    /// that first): `unknown` until a snapshot at least `window` old is held.
    pub fn status(&self, now: f64, window: f64) -> Status {
        let Some(anchor) = self.entries.front() else {
            return Status::Unknown;
        };
        if anchor.time > now - window || self.entries.len() < 2 {
            return Status::Unknown;
        }
        let (start, end) = (anchor, self.entries.back().expect("two entries"));
        // The anchor counts by its own values only; what was merged into it
        // is older than the window.
        let facts = self
            .entries
            .iter()
            .skip(1)
            .fold(start.own, |f, e| f | e.facts);
        let never = |fact: u8| facts & fact == 0;
        if !never(WENT_BACK) {
            return Status::Rewound;
        }
        if start.same_delivery(end) && never(NOTHING_WAITS) && never(PULLS_WAITED) {
            return Status::Stopped;
        }
        if start.ack_floor == end.ack_floor && never(ACK_PENDING_ZERO) {
            return Status::Stalled;
        }
        if never(PENDING_ZERO) && never(PENDING_FELL) && end.pending > start.pending {
            return Status::Lagging;
        }
        Status::Ok
    }
}

#[cfg(test)]
mod tests {
    /// At most `SLICES + 3` entries of 48 bytes: under 1 KB per consumer.
    #[test]
    fn an_entry_is_48_bytes() {
        assert_eq!(std::mem::size_of::<super::Entry>(), 48);
    }
}
