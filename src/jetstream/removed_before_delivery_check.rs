//! Whether a consumer's count could grow between two polls, without
//! counting: `/jsz`'s configuration on demand asks for a consumer's filter
//! before any poll where it could.

use super::{filtered, head, interior, moved_back, unfiltered, Kind, Position};

/// Whether the count of a consumer could grow from poll `before` to poll
/// `now` (each: the stream's `first_seq`, `last_seq`, `messages`,
/// `num_deleted`, then the consumer's `delivered.stream_seq`,
/// `delivered.consumer_seq`, `num_pending`, `num_redelivered`), its
/// configuration being `kind`. False only where
/// [`RemovedTracker::record`](super::RemovedTracker::record) cannot count
/// more: the configuration need not be read again first.
pub(crate) fn could_count(before: [u64; 8], now: [u64; 8], kind: Kind) -> bool {
    let at = |v: [u64; 8]| Position {
        first_seq: v[0],
        last_seq: v[1],
        messages: v[2],
        deleted: v[3],
        delivered: v[4],
        deliveries: v[5],
        pending: v[6],
        redelivered: v[7],
    };
    let (p, s) = (at(before), at(now));
    if moved_back(&p, &s) {
        return false;
    }
    if kind.filtered {
        return filtered(&p, &s, kind)[1] > 0;
    }
    // The count shown grows by the estimate, or when what is open at `s`
    // (at most its head and interior measure) passes what was at `p` (at
    // least its head).
    unfiltered(&p, &s, kind)[1] > 0 || head(&s) + interior(&s, 0) > head(&p)
}
