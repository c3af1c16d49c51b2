//! Messages a stream removed before a consumer delivered them (limits, a
//! purge, a deleted message), counted from successive `/jsz` polls.
//!
//! The server skips such messages without a word: the consumer's delivered
//! stream sequence jumps over them and `num_pending` shrinks. Between two
//! polls of one consumer the delivered stream sequence `D` advances by the
//! messages delivered for the first time plus the ones skipped, and the
//! delivery count `C` (`delivered.consumer_seq`) by every delivery, first
//! or again; so `skipped = ΔD - ΔC + redeliveries`. Removed messages the
//! consumer has not reached yet are the ones below the stream's first
//! sequence `F` and the interior deletes above `D`: they are counted as
//! soon as they are gone, and not again when the consumer jumps them.
//! METRICS.md has the whole arithmetic, its bounds and where it is exact.
//!
//! The figures are the servers' `u64`s, and a reply may be inconsistent
//! or hostile (a sequence at `u64::MAX`, interior deletes above the last
//! sequence). Every sum and difference of them saturates: a figure past
//! `u64::MAX` (past `i64::MAX` in the running sum) is held there, one
//! below 0 is 0. No real stream comes near 2^63 sequences, so only such a
//! reply reaches the limit, and the count shown then holds at the largest
//! value instead of wrapping to a small or negative one.

pub(crate) use crate::sources::jsz::{ConsumerAt, CountingKind, StreamAt};

/// One consumer and its stream as one poll saw them (leader only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Position {
    /// Stream `first_seq`.
    first_seq: u64,
    /// Stream `last_seq`.
    last_seq: u64,
    /// Stream `messages`.
    messages: u64,
    /// Stream `num_deleted` (interior deletes).
    deleted: u64,
    /// `delivered.stream_seq`.
    delivered: u64,
    /// `delivered.consumer_seq`: deliveries, first or again.
    deliveries: u64,
    /// `num_pending`.
    pending: u64,
    /// `num_redelivered`.
    redelivered: u64,
}

/// The counter for one consumer, since the exporter began tracking it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Removed {
    /// Messages removed before delivery (exact, or the estimate).
    pub(crate) messages: u64,
    /// Every increase so far was exact (the bounds met).
    pub(crate) exact: bool,
}

impl Position {
    fn of(stream: StreamAt, c: ConsumerAt) -> Position {
        Position {
            first_seq: stream.first_seq,
            last_seq: stream.last_seq,
            messages: stream.messages,
            deleted: stream.deleted,
            delivered: c.delivered,
            deliveries: c.deliveries,
            pending: c.pending,
            redelivered: c.redelivered,
        }
    }
}

/// A stream's last two polls, kept once for all its consumers: a
/// consumer's last poll is one of them unless it missed a poll since.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamPolls {
    polls: u32,
    before: StreamAt,
    now: StreamAt,
}

impl StreamPolls {
    /// Takes one poll of the stream (once per poll).
    pub(crate) fn record(&mut self, at: StreamAt) {
        self.before = self.now;
        self.now = at;
        self.polls = self.polls.wrapping_add(1);
    }

    /// The stream at poll number `poll`, if still held.
    fn at(&self, poll: u32) -> Option<StreamAt> {
        if poll == self.polls {
            Some(self.now)
        } else if poll == self.polls.wrapping_sub(1) {
            Some(self.before)
        } else {
            None
        }
    }
}

/// The state kept for one consumer between polls (48 bytes: it is held for
/// every consumer). The consumer's delivered sequence and pending count at
/// its last poll are kept by the caller (the status window holds them) and
/// the stream's figures once per stream ([`StreamPolls`]), here only for a
/// consumer that missed a poll of its stream.
#[derive(Debug, Clone, Default)]
pub(crate) struct RemovedTracker {
    /// Counted at the last new start (a reset consumer or stream), plus the
    /// increases since, minus the removed, not yet jumped messages at that
    /// start (counted before it, if at all).
    sum: i64,
    shown: u64,
    /// `delivered.consumer_seq` and `num_redelivered` at the last poll.
    deliveries: u64,
    redelivered: u64,
    /// The stream at the last poll, once the stream's record moved past it.
    stream_missed: Option<Box<StreamAt>>,
    /// The stream's poll number at the last poll.
    stream_poll: u32,
    /// How far the server's `num_pending` is known to fall short of the
    /// messages above `D` ([`shortfall`]).
    short: u16,
    started: bool,
    exact: bool,
}

/// Removed sequences above the delivered one and below the first.
fn head(p: &Position) -> u64 {
    p.first_seq.saturating_sub(1).saturating_sub(p.delivered)
}

/// `L - D - pending` less the head: the interior deletes above the
/// delivered sequence, plus whatever `num_pending` falls short by.
fn unpending(p: &Position) -> u64 {
    let above = p
        .last_seq
        .saturating_sub(p.delivered)
        .saturating_sub(p.pending);
    above.saturating_sub(head(p))
}

/// Interior deletes above the delivered one as one poll measures them:
/// [`unpending`] less the known shortfall `short`, at most the stream's
/// interior deletes. On R3 streams of 2.11+ `D` is the committed position
/// while `num_pending` counts from the leader's newer one, so right after a
/// delivery the measure also holds the delivered, not yet committed
/// messages.
fn interior(p: &Position, short: u64) -> u64 {
    if p.deleted == 0 {
        return 0;
    }
    unpending(p).saturating_sub(short).min(p.deleted)
}

/// What the server's `num_pending` is known to fall short of the stored
/// messages above `D`, after poll `s`, from `known` before it. The server
/// keeps a running count that can lose messages for good (METRICS.md), and
/// [`unpending`] would take them for interior deletes. Only a `steady` poll
/// is taken ([`steady`]), since one reply may catch the count a moment off:
/// its measure above every interior delete shows at least that much short,
/// and with messages pending (none hidden below 0) it shows at most its
/// measure short. Between such polls the last finding holds.
fn shortfall(s: &Position, steady: bool, known: u16) -> u16 {
    if !steady {
        return known;
    }
    let measure = unpending(s);
    let mut short = u64::from(known);
    if s.pending > 0 {
        short = short.min(measure);
    }
    short = short.max(measure.saturating_sub(s.deleted));
    short.min(u64::from(u16::MAX)) as u16
}

/// Removed messages above the delivered one that are counted at poll `s`:
/// the head, plus the interior deletes when the poll before (`p`) saw the
/// same committed position. A delivery not yet committed at `p` would have
/// moved `D` by `s`, so `p`'s measure is clean; each interior delete it saw
/// is still deleted at `s`, above `D` or fallen into the head, hence the
/// least of `s`'s measure and `p`'s less the head's growth. Otherwise the
/// interior deletes are counted when the consumer passes them.
fn open(p: &Position, s: &Position, short: u64) -> u64 {
    if !settled(p, s) {
        return head(s);
    }
    let fell_into_head = head(s).saturating_sub(head(p));
    let was = interior(p, short).saturating_sub(fell_into_head);
    head(s).saturating_add(interior(s, short).min(was))
}

/// The consumer neither delivered nor moved between polls `p` and `s`.
fn settled(p: &Position, s: &Position) -> bool {
    p.delivered == s.delivered && p.deliveries == s.deliveries
}

/// Settled, and [`unpending`] and the stream's interior deletes the same at
/// both polls: what they show of `num_pending` held for a poll interval.
fn steady(p: &Position, s: &Position) -> bool {
    settled(p, s) && unpending(p) == unpending(s) && p.deleted == s.deleted
}

/// Lower bound, estimate and upper bound of one interval, unfiltered.
fn unfiltered(p: &Position, s: &Position, kind: CountingKind) -> [u64; 3] {
    // Neither went back (`moved_back` is checked first).
    let dd = s.delivered.saturating_sub(p.delivered);
    let dc = s.deliveries.saturating_sub(p.deliveries);
    // skipped - redeliveries; a message newly in the redelivered set was
    // redelivered at least once.
    let base = dd as i128 - dc as i128;
    let newly_redelivered = s.redelivered.saturating_sub(p.redelivered) as i128;
    let mut low = clamped(base + newly_redelivered);
    if dd > 0 {
        // The removed messages seen at the last poll below where it is now.
        let passed = (p.first_seq.saturating_sub(1)).min(s.delivered);
        low = low.max(passed.saturating_sub(p.delivered));
    }
    let gone = s.first_seq.saturating_sub(1).min(s.delivered);
    let mut high = gone.saturating_sub(p.delivered).saturating_add(s.deleted);
    // Skipped messages the stream still holds were not removed: a reset
    // (2.14+, `$JS.API.CONSUMER.RESET`) moved the consumer past them
    // without going back in its delivery count (it had delivered none, or
    // more since the reset than before it).
    low = low.min(high);
    // Equally, what was removed above the delivered sequence at the last
    // poll plus what the stream removed since: interior deletes the
    // consumer had passed before are in neither.
    let removed_since = clamped(
        i128::from(s.last_seq) - i128::from(p.last_seq) + i128::from(p.messages)
            - i128::from(s.messages),
    );
    high = high.min(
        head(p)
            .saturating_add(interior(p, 0))
            .saturating_add(removed_since),
    );
    if kind.no_redelivery {
        high = high.min(clamped(base));
    }
    let low = low.min(dd);
    let high = high.max(low).min(dd);
    [low, low, high]
}

/// Lower bound, estimate and upper bound of one interval, filtered:
/// `removed = matching arrivals - first deliveries - Δpending`, where the
/// matching arrivals are unknown between 0 and every arrival.
fn filtered(p: &Position, s: &Position, kind: CountingKind) -> [u64; 3] {
    let arrivals = s.last_seq.saturating_sub(p.last_seq) as i128;
    let removed_by_stream = (arrivals + p.messages as i128 - s.messages as i128).max(0);
    if removed_by_stream == 0 {
        return [0; 3];
    }
    let dc = i128::from(s.deliveries.saturating_sub(p.deliveries));
    let first_high = dc;
    let first_low = if kind.no_redelivery { dc } else { 0 };
    let fell = p.pending as i128 - s.pending as i128;
    // At most what the stream removed: a reset may have lowered `pending`.
    let low = (fell - first_high).clamp(0, removed_by_stream);
    let high = (arrivals + fell - first_low)
        .min(removed_by_stream)
        .max(low);
    // The share of stored messages above the delivered one that match, at
    // the last poll, taken for the arrivals too.
    let above = p.messages.min(p.last_seq.saturating_sub(p.delivered));
    let share = if above == 0 {
        0.0
    } else {
        (p.pending as f64 / above as f64).min(1.0)
    };
    let guess = (share * arrivals as f64).round() as i128 + fell - first_high;
    let estimate = guess.clamp(low, high);
    [low, estimate, high].map(clamped)
}

/// `v` held within `0..=u64::MAX`.
fn clamped(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

/// `v` held at `i64::MAX`.
fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl RemovedTracker {
    /// Takes one poll of the consumer (`now`) on the stream's polls, which
    /// hold this one; `last` is the consumer's delivered sequence and
    /// pending count at its last poll. Returns the counter as it stands.
    pub(crate) fn record(
        &mut self,
        stream: &StreamPolls,
        last: (u64, u64),
        now: ConsumerAt,
        kind: CountingKind,
    ) -> Removed {
        let stream_last = match self.stream_missed.take() {
            Some(at) => Some(*at),
            None => stream.at(self.stream_poll),
        };
        let p = Position::of(
            stream_last.unwrap_or_default(),
            ConsumerAt {
                delivered: last.0,
                deliveries: self.deliveries,
                pending: last.1,
                redelivered: self.redelivered,
            },
        );
        let s = Position::of(stream.now, now);
        (self.deliveries, self.redelivered) = (now.deliveries, now.redelivered);
        self.stream_poll = stream.polls;
        // `stream_last` is always held (see `keep_stream`); were it not,
        // counting from here is the safe way on.
        self.step(&p, s, kind, stream_last.is_some())
    }

    /// Counts the next poll as a new start: the consumer's subject filter
    /// or ack policy changed since the poll before, so the interval
    /// between them is read by neither rule (`stream` holds this poll).
    pub(crate) fn restart(&mut self, stream: &StreamPolls) {
        self.stream_missed = None;
        self.stream_poll = stream.polls.wrapping_add(2);
    }

    /// Called after a poll the consumer was not in: keeps the stream as
    /// the consumer last saw it, before the stream's record moves past it.
    pub(crate) fn keep_stream(&mut self, stream: &StreamPolls) {
        if self.started && self.stream_missed.is_none() && self.stream_poll != stream.polls {
            self.stream_missed = stream.at(self.stream_poll).map(Box::new);
        }
    }

    fn step(&mut self, p: &Position, s: Position, kind: CountingKind, held: bool) -> Removed {
        let p = *p;
        let reset = !self.started || !held || moved_back(&p, &s);
        if reset {
            // A new consumer, a reset one or a new stream: count from here.
            if !self.started {
                self.exact = true;
            }
            self.started = true;
            // All the measure shows is left out: a delivery not yet
            // committed can only make this later count less, never more.
            let open = if kind.filtered {
                0
            } else {
                head(&s).saturating_add(interior(&s, 0))
            };
            self.sum = signed(self.shown).saturating_sub(signed(open));
            return self.removed();
        }
        let [low, estimate, high] = if kind.filtered {
            filtered(&p, &s, kind)
        } else {
            unfiltered(&p, &s, kind)
        };
        self.sum = self.sum.saturating_add(signed(estimate));
        let open = if kind.filtered {
            0
        } else {
            self.short = shortfall(&s, steady(&p, &s), self.short);
            signed(open(&p, &s, u64::from(self.short)))
        };
        self.exact &= low == high;
        let now = u64::try_from(self.sum.saturating_add(open)).unwrap_or(0);
        self.shown = self.shown.max(now);
        self.removed()
    }

    /// The counter as it stands, without a poll.
    pub(crate) fn shown(&self) -> Removed {
        self.removed()
    }

    fn removed(&self) -> Removed {
        Removed {
            messages: self.shown,
            exact: self.exact,
        }
    }
}

/// The consumer or its stream went back between polls `p` and `s` (a
/// reset consumer, a new stream): the count starts again from `s`.
fn moved_back(p: &Position, s: &Position) -> bool {
    s.delivered < p.delivered
        || s.deliveries < p.deliveries
        || s.last_seq < p.last_seq
        || s.first_seq < p.first_seq
}

#[path = "removed_before_delivery_check.rs"]
mod check;
pub(crate) use check::could_count;

#[test]
fn the_state_is_small() {
    assert!(std::mem::size_of::<RemovedTracker>() <= 48);
}

#[cfg(test)]
#[path = "removed_before_delivery_tests.rs"]
mod tests;
