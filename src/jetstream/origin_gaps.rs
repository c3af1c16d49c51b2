//! Messages an origin removed before its mirror or source copied them,
//! counted from the copying stream's own figures over successive polls, so
//! that it works where no `/jsz` shows both ends (another account, domain
//! or leaf node).
//!
//! A mirror keeps its origin's sequences: when it resumes past messages the
//! origin no longer holds, it records the sequences it skipped as deleted.
//! So between two polls its `num_deleted` grows by what it skipped, exactly
//! while its first sequence stays (its own limits can drop deleted
//! sequences off its head: then the growth is a lower bound).
//!
//! A source (2.15+, which reports `seq`, the origin sequence last copied)
//! advances `seq` by every origin message it passes and its stream's last
//! sequence by every one it copied: the difference is what it skipped. Only
//! for a stream with one origin and no subject filter (a filter skips what
//! does not match); a stream that also takes its own publishes shows fewer
//! (a lower bound, flagged once seen).
//!
//! Either way the count comes when the copying resumes past the gap, not
//! while the origin is unreachable (NatsJetStreamOriginInactive covers that
//! time). A stream made again, or a position that goes back, starts the
//! count again from there, keeping what was counted.

use std::collections::HashMap;
use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::stream_origins::{countable, distinct};
use crate::sources::jsz::{OriginInfo, StreamDetail, StreamRow};
use crate::text::families::{counter_family, gauge_family};

/// What a count is kept under: account, stream, whether a mirror, origin
/// stream, origin API prefix.
pub(crate) type GapKey = (String, String, bool, String, String);

/// The copying stream's figures one poll saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    created: u64,
    /// Mirror: its last sequence; source: `seq`.
    at: u64,
    first_seq: u64,
    last_seq: u64,
    deleted: u64,
}

/// The count for one mirror or source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gaps {
    /// Messages skipped since the exporter began tracking it.
    pub(crate) messages: u64,
    /// Every increase so far was exact.
    pub(crate) exact: bool,
}

#[derive(Debug)]
struct Tracked {
    last: Position,
    gaps: Gaps,
    seen: f64,
}

/// The counts of every mirror and source, kept between polls.
#[derive(Debug, Default)]
pub(crate) struct OriginGaps {
    tracked: HashMap<GapKey, Tracked>,
}

/// How long a mirror or source no poll shows is remembered (its count
/// here, its forecast's rate in `origin_forecast.rs`).
pub(crate) const FORGET_AFTER_SECONDS: f64 = 600.0;

fn position(s: &StreamDetail, mirror: bool, o: &OriginInfo) -> Position {
    Position {
        created: s.created,
        at: if mirror {
            s.state.last_seq
        } else {
            o.seq.unwrap_or(0)
        },
        first_seq: s.state.first_seq,
        last_seq: s.state.last_seq,
        deleted: s.state.num_deleted,
    }
}

/// What was skipped between polls `p` and `s`, and whether exactly.
fn skipped(mirror: bool, p: &Position, s: &Position) -> (u64, bool) {
    if s.at == p.at {
        return (0, true);
    }
    if mirror {
        let grew = s.deleted.saturating_sub(p.deleted);
        return (grew, s.first_seq == p.first_seq);
    }
    let passed = s.at - p.at;
    let copied = s.last_seq - p.last_seq;
    (passed.saturating_sub(copied), copied <= passed)
}

impl OriginGaps {
    /// Takes one poll of a mirror or source (`countable` ones only) at
    /// `now` (the exporter's clock); returns its count.
    pub(crate) fn record(
        &mut self,
        key: GapKey,
        (s, mirror, o): (&StreamDetail, bool, &OriginInfo),
        now: f64,
    ) -> Gaps {
        let at = position(s, mirror, o);
        let t = self.tracked.entry(key).or_insert(Tracked {
            last: at,
            gaps: Gaps {
                messages: 0,
                exact: true,
            },
            seen: now,
        });
        let p = t.last;
        let went_back = at.created != p.created || at.at < p.at || at.last_seq < p.last_seq;
        if !went_back {
            let (n, exact) = skipped(mirror, &p, &at);
            t.gaps.messages = t.gaps.messages.saturating_add(n);
            t.gaps.exact &= exact;
        }
        t.last = at;
        t.seen = now;
        t.gaps
    }

    /// Forgets what no poll showed for [`FORGET_AFTER_SECONDS`].
    pub(crate) fn forget(&mut self, now: f64) {
        self.tracked
            .retain(|_, t| now - t.seen <= FORGET_AFTER_SECONDS);
    }
}

impl OriginGaps {
    /// Takes one poll of the countable mirrors and sources of `streams`
    /// (led streams only: held figures are a leader's of before) at `now`.
    pub(crate) fn poll(&mut self, streams: &[StreamRow], now: f64) -> Vec<(GapKey, Gaps)> {
        let mut out = Vec::new();
        for (account, s) in streams {
            for (mirror, o) in distinct(s) {
                if !countable(s, mirror, o) {
                    continue;
                }
                let api = o.external.as_ref().map_or("", |e| &e.api);
                let key: GapKey = (
                    account.to_string(),
                    s.name.clone(),
                    mirror,
                    o.name.to_string(),
                    api.to_string(),
                );
                let gaps = self.record(key.clone(), (s, mirror, o), now);
                out.push((key, gaps));
            }
        }
        self.forget(now);
        out
    }
}

/// The labels of the mirror or source kept under a key.
pub(crate) fn labels((a, s, mirror, o, api): &GapKey) -> [(&'static str, String); 5] {
    let kind = if *mirror { "mirror" } else { "source" };
    [
        ("account", a.clone()),
        ("stream", s.clone()),
        ("kind", kind.to_string()),
        ("origin_stream", o.clone()),
        ("origin_api", api.clone()),
    ]
}

/// Writes the counts of one poll.
pub(crate) fn encode(enc: &mut DescriptorEncoder, rows: &[(GapKey, Gaps)]) -> fmt::Result {
    counter_family(
        enc,
        "nats_delivery_stream_origin_removed_before_copy_messages",
        "Origin messages this mirror or source skipped because the origin no longer held them when it copied (removed before it copied them), since the exporter began tracking it; a lower bound where _exact is 0 (see METRICS.md).",
        rows.iter().map(|(k, g)| (labels(k), g.messages)),
    )?;
    gauge_family(
        enc,
        "nats_delivery_stream_origin_removed_before_copy_exact",
        "1 while every increase of removed_before_copy_messages_total was exact, 0 once one was a lower bound.",
        rows.iter().map(|(k, g)| (labels(k), u64::from(g.exact))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at: u64, first_seq: u64, last_seq: u64, deleted: u64) -> Position {
        Position {
            created: 1,
            at,
            first_seq,
            last_seq,
            deleted,
        }
    }

    #[test]
    fn a_mirror_counts_the_sequences_it_skipped() {
        // Copied 1 to 3, then resumed at 11 to 15: 4 to 10 deleted.
        assert_eq!(skipped(true, &at(3, 1, 3, 0), &at(15, 1, 15, 7)), (7, true));
        // Its own limits moved its head: a lower bound.
        assert_eq!(
            skipped(true, &at(3, 1, 3, 2), &at(15, 3, 15, 7)),
            (5, false)
        );
        // Nothing copied: nothing skipped, whatever its head did.
        assert_eq!(skipped(true, &at(3, 1, 3, 2), &at(3, 3, 3, 0)), (0, true));
    }

    #[test]
    fn a_source_counts_what_it_passed_and_did_not_copy() {
        // seq 3 to 15, the stream 3 to 8: 7 skipped.
        assert_eq!(skipped(false, &at(3, 1, 3, 0), &at(15, 1, 8, 0)), (7, true));
        // Its stream took 2 publishes of its own as well: seen as fewer.
        assert_eq!(skipped(false, &at(3, 1, 3, 0), &at(5, 1, 7, 0)), (0, false));
    }

    #[test]
    fn a_stream_made_again_starts_again_keeping_the_count() {
        let mut gaps = OriginGaps::default();
        let key: GapKey = Default::default();
        let mut s: StreamDetail = serde_json::from_str(
            r#"{"name":"M","created":"a","mirror":{"name":"O"},"state":{"first_seq":1,"last_seq":3}}"#,
        )
        .unwrap();
        let o = OriginInfo::default();
        assert_eq!(gaps.record(key.clone(), (&s, true, &o), 0.0).messages, 0);
        (s.state.last_seq, s.state.num_deleted) = (15, 7);
        assert_eq!(gaps.record(key.clone(), (&s, true, &o), 1.0).messages, 7);
        (s.created, s.state.last_seq, s.state.num_deleted) = (2, 20, 9);
        let g = gaps.record(key.clone(), (&s, true, &o), 2.0);
        assert_eq!((g.messages, g.exact), (7, true));
        gaps.forget(700.0);
        assert!(gaps.tracked.is_empty());
    }
}
