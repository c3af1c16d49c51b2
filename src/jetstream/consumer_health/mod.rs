//! Consumer health an operator can read at a glance: a status per consumer
//! (`ok`, `lagging`, `stalled`, `stopped`, `rewound`, `paused`, `unknown`)
//! from its snapshots over a window, and how far behind it is in time.
//!
//! `/jsz` gives only sequences. The time behind a sequence is estimated from
//! each stream's (sequence, stored time) points kept across polls
//! ([`history`]), or taken exactly from a message timestamp read over NATS
//! ([`crate::jetstream::message_timestamps`]) for the consumers that lag most.
//! The state lives in the poller and is updated once per poll (single flight
//! keeps polls one at a time); memory is bounded: a consumer or stream not
//! seen for longer than the window is forgotten.

pub(crate) mod encode;
mod held;
pub(crate) mod history;
mod name_key;
mod update;
pub(crate) mod window;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use crate::jetstream::consumer_status::Status;
use crate::jetstream::limit_forecast::{stream_front, BehindRate, StreamFront};
use crate::jetstream::message_timestamps::{TimestampReply, TimestampRequest};
use crate::jetstream::removed_before_delivery::{
    ConsumerAt, CountingKind, Removed, RemovedTracker, StreamAt, StreamPolls,
};
use crate::sources::jsz::{ConsumerInfo, ConsumerRow, StreamRow};
use history::StreamHistory;
use name_key::NameKey;
use window::ConsumerWindow;
#[cfg(test)]
use window::Sample;

/// An age in seconds, and whether it came from a read timestamp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Age {
    /// How old, in seconds.
    pub(crate) seconds: f64,
    /// Read (true) or estimated (false).
    pub(crate) exact: bool,
}

/// What the exporter says about one consumer in one scrape. There is one
/// per consumer at every poll, so the options are kept as bits beside their
/// values (40 bytes, against 72 as `Option`s): read through the methods.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConsumerHealthRow {
    /// The consumer's status over the window.
    pub(crate) status: Status,
    /// Which of the values below are there, and which are exact.
    bits: u8,
    delivery_lag: f64,
    oldest_unacked_age: f64,
    removed_messages: u64,
    removal_forecast: f64,
}

const LAG: u8 = 1;
const LAG_EXACT: u8 = 2;
const UNACKED: u8 = 4;
const UNACKED_EXACT: u8 = 8;
const REMOVED_EXACT: u8 = 16;
const FORECAST: u8 = 32;

/// An age's bits (`there`, `exact`) and value; 0 when absent.
fn age_bits(age: Option<Age>, there: u8, exact: u8) -> (u8, f64) {
    age.map_or((0, 0.0), |a| {
        (there | if a.exact { exact } else { 0 }, a.seconds)
    })
}

impl ConsumerHealthRow {
    /// A row before its consumer is judged: status unknown, nothing
    /// removed (exactly), no ages, no forecast.
    pub(crate) const UNJUDGED: ConsumerHealthRow = ConsumerHealthRow {
        status: Status::Unknown,
        bits: REMOVED_EXACT,
        delivery_lag: 0.0,
        oldest_unacked_age: 0.0,
        removed_messages: 0,
        removal_forecast: 0.0,
    };

    /// The row of one consumer: `delivery_lag` is now - store time of the
    /// first undelivered message (`None` when the stream's times are
    /// unknown), `oldest_unacked_age` that of the first unacknowledged one,
    /// `removal_forecast` the seconds until the stream's limits remove a
    /// message the consumer has not delivered
    /// ([`crate::jetstream::limit_forecast`]).
    pub(crate) fn new(
        status: Status,
        (delivery_lag, oldest_unacked_age): (Option<Age>, Option<Age>),
        removed: Removed,
        removal_forecast: Option<f64>,
    ) -> ConsumerHealthRow {
        let (lag_bits, lag) = age_bits(delivery_lag, LAG, LAG_EXACT);
        let (unacked_bits, unacked) = age_bits(oldest_unacked_age, UNACKED, UNACKED_EXACT);
        let removed_bits = if removed.exact { REMOVED_EXACT } else { 0 };
        let forecast_bits = if removal_forecast.is_some() {
            FORECAST
        } else {
            0
        };
        ConsumerHealthRow {
            status,
            bits: lag_bits | unacked_bits | removed_bits | forecast_bits,
            delivery_lag: lag,
            oldest_unacked_age: unacked,
            removed_messages: removed.messages,
            removal_forecast: removal_forecast.unwrap_or(0.0),
        }
    }

    fn age(&self, seconds: f64, there: u8, exact: u8) -> Option<Age> {
        (self.bits & there != 0).then_some(Age {
            seconds,
            exact: self.bits & exact != 0,
        })
    }

    /// now - store time of the first undelivered message; `None` when the
    /// stream's times are unknown.
    pub(crate) fn delivery_lag(&self) -> Option<Age> {
        self.age(self.delivery_lag, LAG, LAG_EXACT)
    }

    /// now - store time of the first unacknowledged message.
    pub(crate) fn oldest_unacked_age(&self) -> Option<Age> {
        self.age(self.oldest_unacked_age, UNACKED, UNACKED_EXACT)
    }

    /// Messages removed before the consumer delivered them.
    pub(crate) fn removed(&self) -> Removed {
        Removed {
            messages: self.removed_messages,
            exact: self.bits & REMOVED_EXACT != 0,
        }
    }

    /// Seconds until the stream's limits remove a message the consumer has
    /// not delivered.
    pub(crate) fn removal_forecast(&self) -> Option<f64> {
        (self.bits & FORECAST != 0).then_some(self.removal_forecast)
    }
}

/// The state kept across polls, by account and stream: looked up by `&str`,
/// so a poll allocates nothing for streams and consumers already known.
#[derive(Debug)]
pub struct ConsumerHealth {
    window: f64,
    accounts: HashMap<Box<str>, HashMap<Box<str>, StreamState>>,
}

/// One stream's history and its consumers' windows.
#[derive(Debug, Default)]
struct StreamState {
    history: StreamHistory,
    /// The stream's first sequence as last polled.
    first_seq: u64,
    /// Its last two polls, for the removed-before-delivery counts.
    polls: StreamPolls,
    /// Its limits that remove messages and its contents, if it has such.
    front: Option<StreamFront>,
    consumers: HashMap<NameKey, ConsumerState>,
}

/// What is kept for one consumer.
#[derive(Debug, Default)]
struct ConsumerState {
    window: ConsumerWindow,
    removed: RemovedTracker,
    behind: BehindRate,
}

impl ConsumerState {
    /// Counts what the stream removed before `c` delivered it; before the
    /// window takes `c`'s snapshot, which holds the last one's positions.
    fn count_removed(&mut self, stream: &StreamPolls, c: &ConsumerInfo) -> Removed {
        let now = ConsumerAt::of(c);
        let kind = CountingKind::of(c.config.as_deref());
        let last = self.window.newest_delivered_and_pending();
        if c.reconfigured {
            self.removed.restart(stream);
        }
        self.removed.record(stream, last, now, kind)
    }
}

/// `map[key]`, made (default) if missing; the key is copied only then.
fn slot<'m, K, V>(map: &'m mut HashMap<K, V>, key: &str) -> &'m mut V
where
    K: Borrow<str> + for<'k> From<&'k str> + Hash + Eq,
    V: Default,
{
    if !map.contains_key(key) {
        map.insert(key.into(), V::default());
    }
    map.get_mut(key).expect("just inserted")
}

/// The first message a consumer has not delivered, and the first it has
/// not had acknowledged, as stream sequences; `None` when nothing is
/// pending (or unacknowledged).
///
/// For a consumer with a subject filter, the message after a position may
/// not match it: the first matching one was stored at or after the one
/// named, so an estimate from these sequences errs old (too large an age);
/// a read timestamp looks for the first matching message.
///
/// A position at `u64::MAX` (no server reaches it) names itself: the
/// next sequence is held there rather than wrapped to 0.
fn positions(c: &ConsumerInfo, first_seq: u64) -> [Option<u64>; 2] {
    let next = |seq: u64| seq.saturating_add(1).max(first_seq);
    let lag = (c.num_pending > 0).then(|| next(c.delivered.stream_seq));
    let unacked =
        (c.num_pending > 0 || c.num_ack_pending > 0).then(|| next(c.ack_floor.stream_seq));
    [lag, unacked]
}

/// The request that reads the time behind `seq` for consumer `c`.
fn request(account: &str, stream: &str, c: &ConsumerInfo, seq: u64) -> TimestampRequest {
    TimestampRequest {
        account: account.to_string(),
        stream: stream.to_string(),
        from_seq: seq,
        filters: c.config.as_ref().map(|k| k.filters()).unwrap_or_default(),
    }
}

/// One consumer of each stream that has a server clock, and the clock.
fn stream_clocks<'a>(
    consumers: &[ConsumerRow<'a>],
) -> HashMap<(&'a str, &'a str), (*const ConsumerInfo, f64)> {
    (consumers.chunk_by(|a, b| a.0 == b.0 && a.1 == b.1))
        .filter_map(|g| {
            let (account, stream, c, clock) = g[0];
            Some(((account, stream), (std::ptr::from_ref(c), clock?)))
        })
        .collect()
}

/// now - the time behind `seq` (0, exactly, when there is no such
/// position): read in `reply` if there is one, else estimated.
fn age(
    history: &StreamHistory,
    seq: Option<u64>,
    now: f64,
    reply: Option<&TimestampReply>,
) -> Option<Age> {
    let (seconds, exact) = match (seq, reply) {
        (None, _) => (0.0, true),
        (Some(_), Some(TimestampReply::Found { unix_seconds, .. })) => (now - unix_seconds, true),
        // Nothing matching is stored from there on: nothing waits.
        (Some(_), Some(TimestampReply::NoMessage)) => (0.0, true),
        (Some(seq), None) => (now - history.estimate(seq)?, false),
    };
    Some(Age {
        seconds: seconds.max(0.0),
        exact,
    })
}

impl ConsumerHealth {
    /// State for a status window of `window` seconds (above 0).
    pub fn new(window: std::time::Duration) -> ConsumerHealth {
        ConsumerHealth {
            window: window.as_secs_f64(),
            accounts: HashMap::new(),
        }
    }

    /// Takes each stream's first and last (sequence, time) points, and
    /// with `new_poll` (once per poll) its figures for the removed counts.
    /// A stream's server clock bounds the time of what came after its last
    /// sequence ([`StreamHistory::record`]): its consumer's row has it, when
    /// that consumer came in the same poll as the stream (a stream without
    /// consumers needs no times).
    fn record_streams(
        &mut self,
        (streams, consumers): (&[StreamRow], &[ConsumerRow]),
        now: f64,
        new_poll: bool,
    ) {
        let clocks = stream_clocks(consumers);
        for (account, s) in streams {
            let st = slot(slot(&mut self.accounts, account), &s.name);
            let state = &s.state;
            st.first_seq = state.first_seq;
            if new_poll {
                st.front = stream_front(s);
                st.polls.record(StreamAt::of(state));
            }
            let (first, last) = (
                (state.first_seq, state.first_ts),
                (state.last_seq, state.last_ts),
            );
            let clock = (clocks.get(&(*account, s.name.as_str())))
                .filter(|(c, _)| s.consumer_detail.as_ptr_range().contains(c))
                .map(|(_, clock)| *clock);
            st.history.record(first, last, (now, clock));
        }
    }

    fn stream(&self, account: &str, stream: &str) -> Option<&StreamState> {
        self.accounts.get(account)?.get(stream)
    }

    /// Up to `limit` timestamps worth reading: those behind the consumers
    /// that lag most, by estimated oldest-unacknowledged age, then delivery
    /// lag. `now` is the exporter's clock ([`ConsumerHealth::update`]), and
    /// stands in for a server that gave no clock.
    pub fn candidates(
        &mut self,
        (streams, consumers): (&[StreamRow], &[ConsumerRow]),
        now: f64,
        limit: usize,
    ) -> Vec<TimestampRequest> {
        if limit == 0 {
            return Vec::new();
        }
        self.record_streams((streams, consumers), now, false);
        let empty = StreamState::default();
        let mut ranked = Vec::new();
        for (i, (account, stream, c, server_now)) in consumers.iter().enumerate() {
            let st = self.stream(account, stream).unwrap_or(&empty);
            let seqs = positions(c, st.first_seq);
            if seqs[1].is_none() {
                continue;
            }
            let now = server_now.unwrap_or(now);
            let [lag, unacked] =
                seqs.map(|seq| age(&st.history, seq, now, None).map_or(0.0, |a| a.seconds));
            ranked.push((unacked, lag, i, seqs));
        }
        // Ties in the order of the rows: the same consumers every poll.
        let order = |a: &(f64, f64, usize, _), b: &(f64, f64, usize, _)| {
            b.0.total_cmp(&a.0)
                .then(b.1.total_cmp(&a.1))
                .then(a.2.cmp(&b.2))
        };
        // Only the head of the order is used: consumers at the same
        // positions share requests, so `limit` requests may take more than
        // `limit` consumers, but rarely many more. The head is put in order
        // a few times `limit` at a time, the rest only if that runs out.
        let mut sorted = 0;
        let mut out: Vec<TimestampRequest> = Vec::new();
        for next in 0..ranked.len() {
            if out.len() == limit {
                break;
            }
            if next == sorted {
                let rest = &mut ranked[sorted..];
                let take = (4 * limit).min(rest.len());
                if take < rest.len() {
                    rest.select_nth_unstable_by(take - 1, order);
                }
                rest[..take].sort_unstable_by(order);
                sorted += take;
            }
            let (_, _, i, [lag, unacked]) = ranked[next];
            let (account, stream, c, _) = consumers[i];
            for seq in [unacked, lag].into_iter().flatten() {
                let req = request(account, stream, c, seq);
                if out.len() < limit && !out.contains(&req) {
                    out.push(req);
                }
            }
        }
        out
    }

    /// Consumers and streams held (for tests of forgetting).
    pub fn held(&self) -> (usize, usize) {
        let streams = self.accounts.values().flat_map(HashMap::values);
        let consumers = streams.clone().map(|st| st.consumers.len()).sum();
        (consumers, streams.count())
    }
}

/// Timestamps read this scrape, by request.
pub type Replies = HashMap<TimestampRequest, TimestampReply>;

#[cfg(test)]
mod start_tests;
#[cfg(test)]
mod takeover_tests;
#[cfg(test)]
mod tests;
