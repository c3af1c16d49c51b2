//! One poll taken into the state: every consumer's snapshot recorded and
//! its health judged, the streams' consumers on two threads at once when
//! there are many (this runs between the last byte of the replies and the
//! first of the text, so it adds to every scrape).

use std::collections::HashMap;

use super::window::{Sample, SLICES};
use super::{age, positions, request, slot, ConsumerHealth, ConsumerHealthRow, Replies};
use super::{Status, StreamState};
use crate::jetstream::limit_forecast::forecast;
use crate::sources::jsz::{ConsumerInfo, ConsumerRow, StreamRow};

/// Below this many consumers one thread judges them all: a few
/// milliseconds, not worth a thread started at every poll.
const TWO_THREADS_FROM: usize = 20_000;

/// The consumers of one stream (rows next to each other), its state, and
/// where their rows go.
type Work<'r, 'a, 's> = (
    &'r [ConsumerRow<'a>],
    &'s mut StreamState,
    &'r mut [ConsumerHealthRow],
);

/// A row before its consumer is judged; every one is overwritten.
const UNJUDGED: ConsumerHealthRow = ConsumerHealthRow::UNJUDGED;

impl ConsumerHealth {
    /// Takes one poll: records every stream's points and every consumer's
    /// snapshot, forgets what was not seen for longer than the window, and
    /// returns each consumer's health, in the order of `consumers`.
    /// `replies` holds timestamps read for [`ConsumerHealth::candidates`];
    /// any consumer without one is estimated.
    ///
    /// `now` is the exporter's clock: the windows, forgetting and the
    /// forecast's rates run on it alone. A consumer's ages are its server's
    /// clock (its row's, else `now`) less times that servers stamped: were
    /// the windows on the servers' clocks, a server whose clock lags
    /// another's by more than the window would have its consumers
    /// forgotten at every poll.
    pub fn update(
        &mut self,
        rows: (&[StreamRow], &[ConsumerRow]),
        now: f64,
        replies: &Replies,
    ) -> Vec<ConsumerHealthRow> {
        self.update_on_threads(rows, now, replies, TWO_THREADS_FROM)
    }

    /// [`ConsumerHealth::update`], on two threads from `two_threads_from`
    /// consumers on.
    fn update_on_threads(
        &mut self,
        (streams, consumers): (&[StreamRow], &[ConsumerRow]),
        now: f64,
        replies: &Replies,
        two_threads_from: usize,
    ) -> Vec<ConsumerHealthRow> {
        self.record_streams((streams, consumers), now, true);
        let groups: Vec<&[ConsumerRow]> = consumers
            .chunk_by(|a, b| a.0 == b.0 && a.1 == b.1)
            .collect();
        for group in &groups {
            slot(slot(&mut self.accounts, group[0].0), group[0].1);
        }
        let window = self.window;
        // Every row written in its place: one list, however many threads.
        let mut judged = vec![UNJUDGED; consumers.len()];
        let mut places = Vec::with_capacity(groups.len());
        let mut rest = judged.as_mut_slice();
        for group in &groups {
            let (place, after) = std::mem::take(&mut rest).split_at_mut(group.len());
            places.push(place);
            rest = after;
        }
        let judge = |work: &mut [Work]| {
            for (group, st, out) in work {
                judge_stream(group, st, out, (now, window), replies);
            }
        };
        // A stream whose consumers come in two runs (never from one
        // poll's leaders, but not ruled out) is judged after the others.
        let mut again = Vec::new();
        {
            let mut states = self.states();
            let mut work = Vec::with_capacity(groups.len());
            for (group, place) in groups.iter().zip(places) {
                match states.remove(&(group[0].0, group[0].1)) {
                    Some(st) => work.push((*group, st, place)),
                    None => again.push((*group, place)),
                }
            }
            let half = half_of_the_consumers(&work);
            if consumers.len() < two_threads_from || half == 0 {
                judge(&mut work);
            } else {
                let (first, second) = work.split_at_mut(half);
                std::thread::scope(|scope| {
                    scope.spawn(|| judge(second));
                    judge(first);
                });
            }
        }
        for (group, place) in again {
            let st = slot(slot(&mut self.accounts, group[0].0), group[0].1);
            judge_stream(group, st, place, (now, window), replies);
        }
        self.forget(now - window);
        judged
    }

    /// Every stream's state, by (account, stream), each once.
    fn states(&mut self) -> HashMap<(&str, &str), &mut StreamState> {
        self.accounts
            .iter_mut()
            .flat_map(|(a, streams)| streams.iter_mut().map(move |(s, st)| ((&**a, &**s), st)))
            .collect()
    }

    /// Forgets consumers and streams not seen since `before`.
    fn forget(&mut self, before: f64) {
        for streams in self.accounts.values_mut() {
            for st in streams.values_mut() {
                st.consumers
                    .retain(|_, c| c.window.last_seen().is_some_and(|t| t >= before));
                for c in st.consumers.values_mut() {
                    c.removed.keep_stream(&st.polls);
                }
            }
            streams.retain(|_, st| st.history.seen >= before || !st.consumers.is_empty());
        }
        self.accounts.retain(|_, streams| !streams.is_empty());
    }
}

/// Where to split `work` so that each part holds about half the consumers.
fn half_of_the_consumers(work: &[Work]) -> usize {
    let total: usize = work.iter().map(|(g, _, _)| g.len()).sum();
    let mut seen = 0;
    work.iter()
        .position(|(g, _, _)| {
            seen += g.len();
            seen * 2 >= total
        })
        .map_or(0, |i| i + 1)
}

/// Records the snapshots of one stream's consumers and judges each, into
/// `out` (as long as `group`).
fn judge_stream(
    group: &[ConsumerRow],
    st: &mut StreamState,
    out: &mut [ConsumerHealthRow],
    (now, window): (f64, f64),
    replies: &Replies,
) {
    let (account, stream) = (group[0].0, group[0].1);
    // Room for the whole group at once: a table grown an insert at a time
    // leaves each one it outgrew behind, a hole between blocks that stay.
    let missing = group.len().saturating_sub(st.consumers.len());
    st.consumers.reserve(missing);
    for (&(_, _, c, server_now), out) in group.iter().zip(out) {
        let server_now = server_now.unwrap_or(now);
        let consumer = slot(&mut st.consumers, &c.name);
        let removed = consumer.count_removed(&st.polls, c);
        consumer.window.record(sample(c, now), window);
        let status = if c.paused == Some(true) {
            Status::Paused
        } else {
            consumer.window.status(now, window)
        };
        let [lag, unacked] = positions(c, st.first_seq).map(|seq| {
            let reply = seq
                .filter(|_| !replies.is_empty())
                .and_then(|seq| replies.get(&request(account, stream, c, seq)));
            age(&st.history, seq, server_now, reply)
        });
        let removal_forecast = st.front.as_ref().and_then(|front| {
            let lag = lag.map(|a| a.seconds);
            let span = window / SLICES;
            forecast(front, &mut consumer.behind, c, lag, (now, span))
        });
        *out = ConsumerHealthRow::new(status, (lag, unacked), removed, removal_forecast);
    }
}

fn sample(c: &ConsumerInfo, time: f64) -> Sample {
    Sample {
        time,
        delivered: c.delivered.stream_seq,
        delivered_active: c.delivered.active_at,
        ack_floor: c.ack_floor.stream_seq,
        pending: c.num_pending,
        ack_pending: c.num_ack_pending,
        waiting: c.num_waiting,
    }
}

#[cfg(test)]
#[path = "update_tests.rs"]
mod tests;
