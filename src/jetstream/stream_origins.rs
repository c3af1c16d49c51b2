//! The mirror and sources of each exported stream, from its leader's
//! `/jsz` entry: how many origin messages it has not copied (`lag`) and how
//! long since it last heard from its origin (`active`). One series per
//! stream and origin, never per consumer.
//!
//! The server updates `lag` only when a message arrives from the origin:
//! while the origin is unreachable it keeps its last value (often 0), and
//! only the age of the last contact grows. So the age, not the lag, is what
//! tells a mirror or source that stopped.

use std::collections::HashSet;
use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use crate::sources::jsz::{OriginInfo, StreamDetail, StreamRow};
use crate::text::families::{gauge_family, Num};

/// The labels of one origin of one stream: account, stream, kind
/// (`mirror` or `source`), origin stream, origin API prefix (empty for an
/// origin in the same account and domain).
type OriginLabels<'a> = [(&'static str, &'a str); 5];

/// Each origin of `s` once: a second mirror or source with the same labels
/// (the same origin under another subject filter) is left out, since its
/// series would repeat the first one's labels.
pub(crate) fn distinct(s: &StreamDetail) -> impl Iterator<Item = (bool, &OriginInfo)> {
    let mut seen = HashSet::new();
    s.origins()
        .filter(move |(mirror, o)| seen.insert((*mirror, &*o.name, origin_api(o))))
}

fn origin_api(o: &OriginInfo) -> &str {
    o.external.as_ref().map_or("", |e| &e.api)
}

fn labels<'a>(
    account: &'a str,
    s: &'a StreamDetail,
    mirror: bool,
    o: &'a OriginInfo,
) -> OriginLabels<'a> {
    [
        ("account", account),
        ("stream", s.name.as_str()),
        ("kind", if mirror { "mirror" } else { "source" }),
        ("origin_stream", &o.name),
        ("origin_api", origin_api(o)),
    ]
}

/// Whether its skips can be counted (`origin_gaps.rs`): a mirror always; a source when the
/// server reports `seq`, it is its stream's only origin and has no filter.
pub(crate) fn countable(s: &StreamDetail, mirror: bool, o: &OriginInfo) -> bool {
    mirror || (o.seq.is_some() && o.filter_subject.is_empty() && s.origins().count() == 1)
}

/// The lag a mirror or source reports.
fn lag(o: &OriginInfo) -> Option<Num> {
    o.lag.map(Num::U)
}

/// Seconds since the last contact; absent when never (`active` -1) or not
/// reported.
fn contact_age(o: &OriginInfo) -> Option<Num> {
    let ns = o.active.get().filter(|n| *n >= 0)?;
    Some(Num::F(ns as f64 / 1e9))
}

/// A family's name, help and value.
type Family = (&'static str, &'static str, fn(&OriginInfo) -> Option<Num>);

/// The families.
const FAMILIES: [Family; 2] = [
    (
        "nats_delivery_stream_origin_lag_messages",
        "Origin messages this mirror or source had not copied, as of the last message it copied (the server's lag; it stays as it was while the origin is unreachable).",
        lag,
    ),
    (
        "nats_delivery_stream_origin_contact_age_seconds",
        "Seconds since this mirror or source last heard from its origin (the server's active); absent when never.",
        contact_age,
    ),
];

/// Writes the families for the mirrors and sources of `streams`.
pub(crate) fn encode(enc: &mut DescriptorEncoder, streams: &[StreamRow]) -> fmt::Result {
    for (name, help, value) in FAMILIES {
        let rows = streams.iter().flat_map(|(a, s)| {
            distinct(s).filter_map(move |(mirror, o)| Some((labels(a, s, mirror, o), value(o)?)))
        });
        gauge_family(enc, name, help, rows)?;
    }
    Ok(())
}

/// How many series [`encode`] writes for `s`.
/// and for the count of what its origins removed before it copied them
/// (`origin_gaps.rs`: a counter and its `_exact` gauge).
pub(crate) fn series(s: &StreamDetail) -> u64 {
    distinct(s)
        .map(|(mirror, o)| {
            let gauges = FAMILIES.iter().filter(|(_, _, v)| v(o).is_some()).count() as u64;
            gauges + 2 * u64::from(countable(s, mirror, o))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(json: &str) -> StreamDetail {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_never_heard_origin_has_no_age_and_a_repeated_one_is_written_once() {
        let s = stream(
            r#"{"name":"S","sources":[
                {"name":"O","lag":3,"active":-1},
                {"name":"O","lag":4,"active":5,"filter_subject":"x"},
                {"name":"O","lag":0,"active":2000000000,"external":{"api":"$JS.A.API"}}]}"#,
        );
        let got: Vec<_> = distinct(&s)
            .map(|(_, o)| (origin_api(o), lag(o), contact_age(o)))
            .collect();
        assert_eq!(
            got,
            [
                ("", Some(Num::U(3)), None),
                ("$JS.A.API", Some(Num::U(0)), Some(Num::F(2.0)))
            ]
        );
        assert_eq!(series(&s), 3);
        let m = stream(r#"{"name":"M","mirror":{"name":"O","lag":0,"active":1}}"#);
        assert_eq!(series(&m), 4);
    }

    #[test]
    fn a_mirror_comes_first_and_a_plain_stream_has_none() {
        let s = stream(r#"{"name":"M","mirror":{"name":"O","lag":1,"active":10}}"#);
        let got: Vec<_> = s.origins().map(|(m, o)| (m, &*o.name)).collect();
        assert_eq!(got, [(true, "O")]);
        assert_eq!(series(&stream(r#"{"name":"P"}"#)), 0);
    }
}
