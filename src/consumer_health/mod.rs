//! Consumer health an operator can read at a glance: a status per consumer
//! (`ok`, `lagging`, `stalled`, `stopped`, `rewound`, `paused`, `unknown`)
//! from its snapshots over a window, and how far behind it is in time.
//!
//! `/jsz` gives only sequences. The time behind a sequence is estimated from
//! each stream's (sequence, stored time) points kept across polls
//! ([`history`]), or taken exactly from a message timestamp read over NATS
//! ([`crate::message_timestamps`]) for the consumers that lag most.
//! The state lives in the poller and is updated once per poll (single flight
//! keeps polls one at a time); memory is bounded: a consumer or stream not
//! seen for longer than the window is forgotten.

pub mod encode;
pub mod history;
pub mod window;

use std::collections::HashMap;

use crate::message_timestamps::{TimestampReply, TimestampRequest};
use crate::sources::jsz::{ConsumerInfo, ConsumerRow, StreamRow};
use history::StreamHistory;
use window::{ConsumerWindow, Sample};

/// A consumer's status, by the first rule that matches (see METRICS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The window is not full yet: never a guess.
    Unknown,
    /// None of the below.
    Ok,
    /// The backlog was never empty, never fell, and grew over the window.
    Lagging,
    /// The ack floor did not move while messages waited for acknowledgement.
    Stalled,
    /// Nothing delivered, messages waiting, no pull request waiting.
    Stopped,
    /// The delivered position or the ack floor went back.
    Rewound,
    /// Paused (2.11+).
    Paused,
}

impl Status {
    /// Every status, in the order the series are written.
    pub const ALL: [Status; 7] = [
        Status::Unknown,
        Status::Ok,
        Status::Lagging,
        Status::Stalled,
        Status::Stopped,
        Status::Rewound,
        Status::Paused,
    ];

    /// The `status` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Unknown => "unknown",
            Status::Ok => "ok",
            Status::Lagging => "lagging",
            Status::Stalled => "stalled",
            Status::Stopped => "stopped",
            Status::Rewound => "rewound",
            Status::Paused => "paused",
        }
    }
}

/// An age in seconds, and whether it came from a read timestamp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Age {
    /// Seconds.
    pub seconds: f64,
    /// Read (true) or estimated (false).
    pub exact: bool,
}

/// What the exporter says about one consumer in one scrape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConsumerHealthRow {
    /// The status.
    pub status: Status,
    /// now - store time of the first undelivered message; `None` when the
    /// stream's times are unknown.
    pub delivery_lag: Option<Age>,
    /// now - store time of the first unacknowledged message.
    pub oldest_unacked_age: Option<Age>,
}

/// The state kept across polls.
#[derive(Debug)]
pub struct ConsumerHealth {
    window: f64,
    streams: HashMap<(String, String), StreamHistory>,
    consumers: HashMap<String, ConsumerWindow>,
}

fn stream_key(account: &str, stream: &str) -> (String, String) {
    (account.to_string(), stream.to_string())
}

/// One key per consumer; `\n` cannot occur in NATS names.
fn consumer_key(account: &str, stream: &str, consumer: &str) -> String {
    format!("{account}\n{stream}\n{consumer}")
}

/// The first message a consumer has not delivered, and the first it has
/// not had acknowledged, as stream sequences; `None` when nothing is
/// pending (or unacknowledged).
///
/// For a consumer with a subject filter, the message after a position may
/// not match it: the first matching one was stored at or after the one
/// named, so an estimate from these sequences errs old (too large an age);
/// a read timestamp looks for the first matching message.
fn positions(c: &ConsumerInfo, first_seq: u64) -> (Option<u64>, Option<u64>) {
    let lag = (c.num_pending > 0).then(|| (c.delivered.stream_seq + 1).max(first_seq));
    let unacked = (c.num_pending > 0 || c.num_ack_pending > 0)
        .then(|| (c.ack_floor.stream_seq + 1).max(first_seq));
    (lag, unacked)
}

impl ConsumerHealth {
    /// State for a status window of `window` seconds (above 0).
    pub fn new(window: std::time::Duration) -> ConsumerHealth {
        ConsumerHealth {
            window: window.as_secs_f64(),
            streams: HashMap::new(),
            consumers: HashMap::new(),
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

    /// Takes each stream's first and last (sequence, time) points.
    fn record_streams(&mut self, streams: &[StreamRow], now: f64) {
        for (account, s) in streams {
            let h = self
                .streams
                .entry(stream_key(account, &s.name))
                .or_default();
            let st = &s.state;
            h.record((st.first_seq, st.first_ts), (st.last_seq, st.last_ts), now);
        }
    }

    /// Each stream's first sequence, by (account, stream).
    fn first_seqs<'a>(streams: &[StreamRow<'a>]) -> HashMap<(&'a str, &'a str), u64> {
        streams
            .iter()
            .map(|(a, s)| ((*a, s.name.as_str()), s.state.first_seq))
            .collect()
    }

    /// The requests behind a consumer's two ages: (delivery lag, oldest unacked).
    fn requests(
        c: &ConsumerInfo,
        account: &str,
        stream: &str,
        first_seq: u64,
    ) -> [Option<TimestampRequest>; 2] {
        let filters = c.config.as_ref().map(|k| k.filters()).unwrap_or_default();
        let (lag, unacked) = positions(c, first_seq);
        [lag, unacked].map(|seq| {
            Some(TimestampRequest {
                account: account.to_string(),
                stream: stream.to_string(),
                from_seq: seq?,
                filters: filters.clone(),
            })
        })
    }

    fn age(&self, req: &Option<TimestampRequest>, now: f64, replies: &Replies) -> Option<Age> {
        let Some(req) = req else {
            return Some(Age {
                seconds: 0.0,
                exact: true,
            });
        };
        match replies.get(req) {
            Some(TimestampReply::Found { unix_seconds, .. }) => Some(Age {
                seconds: (now - unix_seconds).max(0.0),
                exact: true,
            }),
            // Nothing matching is stored from there on: nothing waits.
            Some(TimestampReply::NoMessage) => Some(Age {
                seconds: 0.0,
                exact: true,
            }),
            None => {
                let h = self.streams.get(&stream_key(&req.account, &req.stream))?;
                Some(Age {
                    seconds: (now - h.estimate(req.from_seq)?).max(0.0),
                    exact: false,
                })
            }
        }
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
        self.record_streams(streams, Self::server_clock(consumers, now));
        let none = Replies::new();
        let first_seqs = Self::first_seqs(streams);
        let mut ranked = Vec::new();
        for (account, stream, c, server_now) in consumers {
            let now = server_now.unwrap_or(now);
            let first_seq = first_seqs.get(&(*account, *stream)).copied().unwrap_or(0);
            let reqs = Self::requests(c, account, stream, first_seq);
            let age = |r| self.age(r, now, &none).map_or(0.0, |a| a.seconds);
            if reqs.iter().any(Option::is_some) {
                ranked.push((age(&reqs[1]), age(&reqs[0]), reqs));
            }
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
        let mut out: Vec<TimestampRequest> = Vec::new();
        for [lag, unacked] in ranked.into_iter().map(|r| r.2) {
            if out.len() == limit {
                break;
            }
            for req in [unacked, lag].into_iter().flatten() {
                if out.len() < limit && !out.contains(&req) {
                    out.push(req);
                }
            }
        }
        out
    }

    /// Takes one poll: records every stream's points and every consumer's
    /// snapshot, forgets what was not seen for longer than the window, and
    /// returns each consumer's health, in the order of `consumers`.
    /// `replies` holds timestamps read for [`ConsumerHealth::candidates`];
    /// any consumer without one is estimated.
    pub fn update(
        &mut self,
        (streams, consumers): (&[StreamRow], &[ConsumerRow]),
        now: f64,
        replies: &Replies,
    ) -> Vec<ConsumerHealthRow> {
        let latest = Self::server_clock(consumers, now);
        self.record_streams(streams, latest);
        let first_seqs = Self::first_seqs(streams);
        let mut out = Vec::with_capacity(consumers.len());
        for (account, stream, c, server_now) in consumers {
            let now = server_now.unwrap_or(now);
            let window = self
                .consumers
                .entry(consumer_key(account, stream, &c.name))
                .or_default();
            window.record(sample(c, now), self.window);
            let status = if c.paused == Some(true) {
                Status::Paused
            } else {
                window.status(now, self.window)
            };
            let first_seq = first_seqs.get(&(*account, *stream)).copied().unwrap_or(0);
            let [lag, unacked] = Self::requests(c, account, stream, first_seq);
            out.push(ConsumerHealthRow {
                status,
                delivery_lag: self.age(&lag, now, replies),
                oldest_unacked_age: self.age(&unacked, now, replies),
            });
        }
        let forget_before = latest - self.window;
        self.consumers
            .retain(|_, w| w.last_seen().is_some_and(|t| t >= forget_before));
        self.streams.retain(|_, h| h.seen >= forget_before);
        out
    }

    /// Consumers and streams held (for tests of forgetting).
    pub fn held(&self) -> (usize, usize) {
        (self.consumers.len(), self.streams.len())
    }
}

/// Timestamps read this scrape, by request.
pub type Replies = HashMap<TimestampRequest, TimestampReply>;

fn sample(c: &ConsumerInfo, time: f64) -> Sample {
    Sample {
        time,
        delivered: c.delivered.stream_seq,
        delivered_active: c.delivered.last_active.unwrap_or(f64::NAN),
        ack_floor: c.ack_floor.stream_seq,
        pending: c.num_pending,
        ack_pending: c.num_ack_pending,
        waiting: c.num_waiting,
    }
}

#[cfg(test)]
mod tests;
