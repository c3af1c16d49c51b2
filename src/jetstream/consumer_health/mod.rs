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
pub(crate) mod history;
mod update;
pub(crate) mod window;

use std::collections::HashMap;

use crate::jetstream::consumer_status::Status;
use crate::jetstream::limit_forecast::{stream_front, BehindRate, StreamFront};
use crate::jetstream::message_timestamps::{TimestampReply, TimestampRequest};
use crate::jetstream::removed_before_delivery::{
    ConsumerAt, Kind, Removed, RemovedTracker, StreamAt, StreamPolls,
};
use crate::sources::jsz::{ConsumerInfo, ConsumerRow, StreamRow};
use history::StreamHistory;
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

/// What the exporter says about one consumer in one scrape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConsumerHealthRow {
    /// The consumer's status over the window.
    pub(crate) status: Status,
    /// now - store time of the first undelivered message; `None` when the
    /// stream's times are unknown.
    pub(crate) delivery_lag: Option<Age>,
    /// now - store time of the first unacknowledged message.
    pub(crate) oldest_unacked_age: Option<Age>,
    /// Messages removed before the consumer delivered them.
    pub(crate) removed: Removed,
    /// Seconds until the stream's limits remove a message the consumer has
    /// not delivered ([`crate::jetstream::limit_forecast`]).
    pub(crate) removal_forecast: Option<f64>,
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
    consumers: HashMap<Box<str>, ConsumerState>,
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
        let now = ConsumerAt {
            delivered: c.delivered.stream_seq,
            deliveries: c.delivered.consumer_seq,
            pending: c.num_pending,
            redelivered: c.num_redelivered,
        };
        let config = c.config.as_ref();
        let kind = Kind {
            filtered: config
                .is_some_and(|k| !k.filter_subject.is_empty() || !k.filter_subjects.is_empty()),
            no_redelivery: config.is_some_and(|k| k.acks_none || k.max_deliver == Some(1)),
        };
        let last = self.window.newest_delivered_and_pending();
        if c.reconfigured {
            self.removed.restart(stream);
        }
        self.removed.record(stream, last, now, kind)
    }
}

/// `map[key]`, made (default) if missing; the key is copied only then.
fn slot<'m, V: Default>(map: &'m mut HashMap<Box<str>, V>, key: &str) -> &'m mut V {
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
fn positions(c: &ConsumerInfo, first_seq: u64) -> [Option<u64>; 2] {
    let lag = (c.num_pending > 0).then(|| (c.delivered.stream_seq + 1).max(first_seq));
    let unacked = (c.num_pending > 0 || c.num_ack_pending > 0)
        .then(|| (c.ack_floor.stream_seq + 1).max(first_seq));
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

    /// The servers' clock (the newest any consumer's poll gave), else `now`.
    fn server_clock(consumers: &[ConsumerRow], now: f64) -> f64 {
        consumers
            .iter()
            .filter_map(|c| c.3)
            .reduce(f64::max)
            .unwrap_or(now)
    }

    /// Takes each stream's first and last (sequence, time) points, and
    /// with `new_poll` (once per poll) its figures for the removed counts.
    fn record_streams(&mut self, streams: &[StreamRow], now: f64, new_poll: bool) {
        for (account, s) in streams {
            let st = slot(slot(&mut self.accounts, account), &s.name);
            let state = &s.state;
            st.first_seq = state.first_seq;
            if new_poll {
                st.front = stream_front(s);
                st.polls.record(StreamAt {
                    first_seq: state.first_seq,
                    last_seq: state.last_seq,
                    messages: state.messages,
                    deleted: state.num_deleted,
                });
            }
            let (first, last) = (
                (state.first_seq, state.first_ts),
                (state.last_seq, state.last_ts),
            );
            st.history.record(first, last, now);
        }
    }

    fn stream(&self, account: &str, stream: &str) -> Option<&StreamState> {
        self.accounts.get(account)?.get(stream)
    }

    /// Up to `limit` timestamps worth reading: those behind the consumers
    /// that lag most, by estimated oldest-unacknowledged age, then delivery
    /// lag. `now` stands in for a server that gave no clock.
    pub fn candidates(
        &mut self,
        (streams, consumers): (&[StreamRow], &[ConsumerRow]),
        now: f64,
        limit: usize,
    ) -> Vec<TimestampRequest> {
        if limit == 0 {
            return Vec::new();
        }
        self.record_streams(streams, Self::server_clock(consumers, now), false);
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
mod tests;
