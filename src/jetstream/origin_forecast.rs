//! How long until an origin's limits remove a message its mirror or source
//! has not copied: the forecast of the loss `origin_gaps.rs` counts once it
//! happened, with the consumers' arithmetic (`limit_forecast.rs`), the
//! mirror or source in the place of the consumer.
//!
//! It needs the origin's limits and contents beside the copying stream's
//! position, so it is made only where one poll shows both: the origin in
//! the same account, reached without an API prefix (an origin in another
//! account or domain is named by a prefix no `/jsz` maps to an account),
//! listed by the same server that leads the copying stream (one server is
//! in one domain: a stream of the same name elsewhere is never taken for
//! it). The position is a mirror's last sequence (it keeps its origin's
//! sequences) or a source's `seq` (2.15+); with no subject filter, since
//! with one the next message to copy is not the next sequence.

use std::collections::HashMap;
use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::consumer_health::history::StreamHistory;
use super::limit_forecast::{forecast_for, stream_front, BehindRate};
use super::origin_gaps::{labels, GapKey, FORGET_AFTER_SECONDS};
use super::stream_origins::distinct;
use crate::sources::jsz::{JszPoll, OriginInfo, StreamDetail, StreamRow};
use crate::text::families::gauge_family;

/// What is kept for one mirror or source.
#[derive(Debug, Default)]
struct Tracked {
    rate: BehindRate,
    /// The origin's (sequence, time) points, for the age of the next
    /// message to copy, as consumer health keeps them for a stream.
    history: StreamHistory,
}

/// The rates of every mirror and source forecast, kept between polls.
#[derive(Debug, Default)]
pub(crate) struct OriginForecasts {
    tracked: HashMap<GapKey, Tracked>,
}

/// The copying stream's position in its origin, where a forecast can use
/// it: the last origin sequence it copied.
fn position(s: &StreamDetail, mirror: bool, o: &OriginInfo) -> Option<u64> {
    if o.external.is_some() || !o.filter_subject.is_empty() {
        return None;
    }
    if mirror {
        Some(s.state.last_seq)
    } else {
        o.seq
    }
}

/// Each stream of the polls by its address, with its account's streams by
/// name and its server's clock: the origin is looked up beside it.
type Located<'a> =
    HashMap<*const StreamDetail, (&'a HashMap<&'a str, &'a StreamDetail>, Option<f64>)>;

/// An account's streams by name, those with a mirror or source, and its
/// server's clock, if it gave one.
type Account<'a> = (
    HashMap<&'a str, &'a StreamDetail>,
    Vec<&'a StreamDetail>,
    Option<f64>,
);

/// The accounts of `polls` that hold a stream with a mirror or source.
fn by_name<'a>(polls: &[Option<&'a JszPoll>]) -> Vec<Account<'a>> {
    let mut out = Vec::new();
    for poll in polls.iter().flatten() {
        for acc in &poll.accounts {
            let copying: Vec<&StreamDetail> = (acc.stream_detail.iter())
                .filter(|s| s.origins().next().is_some())
                .collect();
            if copying.is_empty() {
                continue;
            }
            let names = acc.stream_detail.iter().map(|s| (s.name.as_str(), s));
            out.push((names.collect(), copying, poll.now));
        }
    }
    out
}

impl OriginForecasts {
    /// Takes one poll at `now` (the exporter's clock): `streams` are the led
    /// rows, `polls` every server's `/jsz`; rates are measured over spans
    /// of at least `span` seconds. Returns each forecast.
    pub(crate) fn poll(
        &mut self,
        streams: &[StreamRow],
        polls: &[Option<&JszPoll>],
        (now, span): (f64, f64),
    ) -> Vec<(GapKey, f64)> {
        let accounts = by_name(polls);
        let located: Located = (accounts.iter())
            .flat_map(|(names, copying, clock)| {
                copying
                    .iter()
                    .map(move |s| (std::ptr::from_ref(*s), (names, *clock)))
            })
            .collect();
        let mut out = Vec::new();
        for (account, s) in streams {
            let Some(&(names, server_clock)) = located.get(&std::ptr::from_ref(*s)) else {
                continue;
            };
            let server_now = server_clock.unwrap_or(now);
            for (mirror, o) in distinct(s) {
                let Some(at) = position(s, mirror, o) else {
                    continue;
                };
                let Some(origin) = names.get(&*o.name).filter(|x| !std::ptr::eq(**x, *s)) else {
                    continue;
                };
                let Some(front) = stream_front(origin) else {
                    continue;
                };
                let key: GapKey = (
                    account.to_string(),
                    s.name.clone(),
                    mirror,
                    o.name.to_string(),
                    String::new(),
                );
                let t = self.tracked.entry(key.clone()).or_default();
                let state = &origin.state;
                let first = (state.first_seq, state.first_ts);
                let last = (state.last_seq, state.last_ts);
                t.history.record(first, last, (now, server_clock));
                let pending = state.last_seq > at;
                let next = at.saturating_add(1).max(state.first_seq);
                let lag = (t.history.estimate(next)).map(|ts| (server_now - ts).max(0.0));
                let reader = (at, pending);
                if let Some(f) = forecast_for(&front, &mut t.rate, reader, lag, (now, span)) {
                    out.push((key, f));
                }
            }
        }
        self.tracked
            .retain(|_, t| now - t.history.seen <= FORGET_AFTER_SECONDS);
        out
    }
}

/// Writes the forecasts of one poll.
pub(crate) fn encode(enc: &mut DescriptorEncoder, rows: &[(GapKey, f64)]) -> fmt::Result {
    gauge_family(
        enc,
        "nats_delivery_stream_origin_removal_forecast_seconds",
        "Seconds until the origin's limits (the soonest of max_msgs and max_bytes with discard old, and max_age) remove a message this mirror or source has not copied, at the current rates; 0 while they remove; absent where one server's /jsz does not show the origin beside it, nothing waits or it keeps up (see METRICS.md).",
        rows.iter().map(|(k, f)| (labels(k), *f)),
    )
}

#[cfg(test)]
#[path = "origin_forecast_tests.rs"]
mod tests;
