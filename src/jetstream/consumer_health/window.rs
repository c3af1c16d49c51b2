//! A consumer's recent past: compact snapshots over the status window, and
//! the status rules read from them.
//!
//! Memory is bounded whatever the scrape rate: snapshots closer together
//! than a slice of the window are merged into one entry, which remembers
//! what the status rules need to know about every snapshot merged into it
//! (was the backlog ever empty, did it fall, did a position go back, ...).
//! So a consumer holds at most [`MAX_ENTRIES`] entries, and no event
//! between two kept entries is lost.
//!
//! Every rule compares the window's start with its end; with no position
//! gone back (the `rewound` rule comes first) that is also a fact about every
//! step between (the ack floor is the same at both ends exactly when no step
//! moved it). So an entry holds only its time and facts, and the consumer
//! only its newest positions, inline.

use super::Status;

/// Entries per window (besides the anchor and the newest).
pub(crate) const SLICES: f64 = 8.0;

/// Most entries a consumer holds: a slice apart over the window, the
/// anchor, the newest.
pub(crate) const MAX_ENTRIES: usize = SLICES as usize + 3;

/// One consumer as one poll saw it (leader only).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    /// The exporter's clock at the poll, Unix seconds.
    pub(crate) time: f64,
    /// `delivered.stream_seq`.
    pub(crate) delivered: u64,
    /// `delivered.last_active`, Unix seconds; NaN when never.
    pub(crate) delivered_active: f64,
    /// `ack_floor.stream_seq`.
    pub(crate) ack_floor: u64,
    /// `num_pending`.
    pub(crate) pending: u64,
    /// `num_ack_pending`.
    pub(crate) ack_pending: u64,
    /// `num_waiting`.
    pub(crate) waiting: u64,
}

/// Facts about one snapshot, as bits.
const PENDING_ZERO: u16 = 1;
const NOTHING_WAITS: u16 = 2;
const ACK_PENDING_ZERO: u16 = 4;
const PULLS_WAITED: u16 = 8;
/// Facts about the step from one snapshot to the next.
const PENDING_FELL: u16 = 16;
const WENT_BACK: u16 = 32;
const PENDING_ROSE: u16 = 64;
/// The delivered position or the time it was reached changed.
const DELIVERED: u16 = 128;
const ACK_FLOOR_MOVED: u16 = 256;

impl Sample {
    fn facts(&self) -> u8 {
        let mut f = 0;
        if self.pending == 0 {
            f |= PENDING_ZERO;
        }
        if self.pending == 0 && self.ack_pending == 0 {
            f |= NOTHING_WAITS;
        }
        if self.ack_pending == 0 {
            f |= ACK_PENDING_ZERO;
        }
        if self.waiting > 0 {
            f |= PULLS_WAITED;
        }
        f as u8
    }
}

/// The positions of the newest snapshot, which the next one is compared with.
#[derive(Debug, Clone, Copy, Default)]
struct Positions {
    delivered: u64,
    delivered_active: f64,
    ack_floor: u64,
    pending: u64,
}

impl Positions {
    fn of(s: &Sample) -> Positions {
        Positions {
            delivered: s.delivered,
            delivered_active: s.delivered_active,
            ack_floor: s.ack_floor,
            pending: s.pending,
        }
    }

    /// Facts about going from `self` to `next`.
    fn step_to(&self, next: &Positions) -> u16 {
        let mut f = 0;
        if next.pending < self.pending {
            f |= PENDING_FELL;
        }
        if next.pending > self.pending {
            f |= PENDING_ROSE;
        }
        if next.delivered < self.delivered || next.ack_floor < self.ack_floor {
            f |= WENT_BACK;
        }
        if next.delivered != self.delivered
            || next.delivered_active.to_bits() != self.delivered_active.to_bits()
        {
            f |= DELIVERED;
        }
        if next.ack_floor != self.ack_floor {
            f |= ACK_FLOOR_MOVED;
        }
        f
    }
}

/// One or more merged snapshots: when the newest was taken (seconds after
/// the window's base time), its `own` facts, and `facts` about every
/// snapshot merged into the entry and every step to them from the snapshot
/// before. An `f32` offset is exact to about 1e-7 of the window's span.
/// Packed: 7 bytes, not 8, in every one of a consumer's entries.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, packed)]
struct Entry {
    offset: f32,
    facts: u16,
    own: u8,
}

/// A consumer's entries, oldest first, with the positions of its newest
/// snapshot. Room for one entry more than a window keeps: a new entry is
/// added before the oldest ones are dropped.
#[derive(Debug, Default, Clone)]
pub(crate) struct ConsumerWindow {
    /// The time of the oldest entry's offset 0 (moved with the oldest entry).
    base: f64,
    newest: Positions,
    entries: [Entry; MAX_ENTRIES + 1],
    len: u8,
}

impl ConsumerWindow {
    fn time(&self, i: usize) -> f64 {
        self.base + f64::from(self.entries[i].offset)
    }

    /// Adds one poll's snapshot and drops what the window no longer needs:
    /// every entry older than the newest one at least `window` old (the anchor).
    pub(crate) fn record(&mut self, s: Sample, window: f64) {
        let len = self.len();
        let slice = window / SLICES;
        let positions = Positions::of(&s);
        let own = s.facts();
        let mut new = Entry {
            offset: 0.0,
            facts: u16::from(own),
            own,
        };
        if len == 0 {
            self.base = s.time;
        } else {
            new.facts |= self.newest.step_to(&positions);
            // A clock stepped back: within one consumer's window time
            // never goes back.
            new.offset = ((s.time - self.base) as f32).max(self.entries[len - 1].offset);
        }
        self.newest = positions;
        // The newest entry takes snapshots until it is a slice after the one
        // before it: kept entries are a slice apart, so a window holds at
        // most `MAX_ENTRIES` (the last slot is never needed; should rounding
        // ever fill it, the newest entry takes the snapshot instead).
        let full = len == self.entries.len();
        let merge = len >= 2 && (full || self.time(len - 1) - self.time(len - 2) < slice);
        if merge {
            new.facts |= self.entries[len - 1].facts;
            self.entries[len - 1] = new;
        } else {
            self.entries[len] = new;
            self.len += 1;
        }
        let mut drop = 0;
        while drop + 1 < self.len() && self.time(drop + 1) <= s.time - window {
            drop += 1;
        }
        if drop > 0 {
            let len = self.len();
            self.entries.copy_within(drop..len, 0);
            self.len -= drop as u8;
            // Offsets start at the oldest entry again, so they stay small.
            let shift = self.entries[0].offset;
            self.base += f64::from(shift);
            for e in &mut self.entries[..len - drop] {
                e.offset -= shift;
            }
        }
    }

    /// The delivered sequence and pending count of the newest snapshot
    /// (0 and 0 before the first).
    pub(crate) fn newest_delivered_and_pending(&self) -> (u64, u64) {
        (self.newest.delivered, self.newest.pending)
    }

    /// When this consumer was last seen.
    pub(crate) fn last_seen(&self) -> Option<f64> {
        Some(self.time(self.len().checked_sub(1)?))
    }

    /// Entries held (for tests of the memory bound).
    pub(crate) fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// The status at `now` by the rules after `paused` (the caller checks
    /// that first), as soon as the snapshots held decide it: `unknown` only
    /// while they do not.
    ///
    /// Once a snapshot at least `window` old is held, the rules read the
    /// window from it. Before, the snapshots held are the end of the window
    /// and its start is unseen. An unseen snapshot could only add facts
    /// (a step back, a delivery, a backlog of 0, ...), and each rule after
    /// `rewound` needs some fact never to have happened: so a fact held
    /// rules out for good every status that needs it absent. `rewound` is
    /// certain once a step back is held; `ok` once `stopped`, `stalled` and
    /// `lagging` are all ruled out. (A step back before the first snapshot
    /// is never seen, whatever the window.)
    pub(crate) fn status(&self, now: f64, window: f64) -> Status {
        let Some(first) = self.len().checked_sub(1).map(|_| self.time(0)) else {
            return Status::Unknown;
        };
        let full = self.len() >= 2 && first <= now - window;
        // The anchor of a full window counts by its own values only; what
        // was merged into it is older than the window. The steps after it
        // are in the entries after it. Before the window is full, the first
        // entry is the first snapshot, nothing merged into it.
        let entries = &self.entries[..self.len()];
        let facts = entries[1..]
            .iter()
            .fold(u16::from(entries[0].own), |f, e| f | e.facts);
        let never = |fact: u16| facts & fact == 0;
        if !never(WENT_BACK) {
            return Status::Rewound;
        }
        // Positions only went forward: one that differs between start and
        // end is one that some step moved.
        let may_be_stopped = never(DELIVERED) && never(NOTHING_WAITS) && never(PULLS_WAITED);
        let may_be_stalled = never(ACK_FLOOR_MOVED) && never(ACK_PENDING_ZERO);
        // A backlog that never fell is higher at the end exactly when some
        // step raised it.
        let may_be_lagging = never(PENDING_ZERO) && never(PENDING_FELL);
        if !full {
            let undecided = may_be_stopped || may_be_stalled || may_be_lagging;
            return if undecided {
                Status::Unknown
            } else {
                Status::Ok
            };
        }
        if may_be_stopped {
            return Status::Stopped;
        }
        if may_be_stalled {
            return Status::Stalled;
        }
        if may_be_lagging && !never(PENDING_ROSE) {
            return Status::Lagging;
        }
        Status::Ok
    }
}

#[cfg(test)]
mod tests {
    /// 7-byte entries, and a whole consumer's window in one value: nothing
    /// else is allocated for it.
    #[test]
    fn a_window_is_small() {
        assert_eq!(std::mem::size_of::<super::Entry>(), 7);
        assert!(std::mem::size_of::<super::ConsumerWindow>() <= 128);
    }
}
