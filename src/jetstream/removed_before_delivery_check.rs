//! Whether a consumer's count could grow between two polls, without
//! counting: `/jsz`'s configuration on demand asks for a consumer's filter
//! before any poll where it could.

use super::{filtered, head, interior, moved_back, unfiltered, Position};
use super::{ConsumerAt, CountingKind, StreamAt};

/// Whether the count of a consumer could grow from poll `before` to poll
/// `now` (each: its stream's figures and its own), its configuration being
/// `kind`. False only where
/// [`RemovedTracker::record`](super::RemovedTracker::record) cannot count
/// more: the configuration need not be read again first.
pub(crate) fn could_count(
    before: (StreamAt, ConsumerAt),
    now: (StreamAt, ConsumerAt),
    kind: CountingKind,
) -> bool {
    let (p, s) = (Position::of(before.0, before.1), Position::of(now.0, now.1));
    if moved_back(&p, &s) {
        return false;
    }
    if kind.filtered {
        return filtered(&p, &s, kind)[1] > 0;
    }
    // The count shown grows by the estimate, or when what is open at `s`
    // (at most its head and interior measure) passes what was at `p` (at
    // least its head).
    unfiltered(&p, &s, kind)[1] > 0 || head(&s).saturating_add(interior(&s, 0)) > head(&p)
}
