//! Streams and consumers one failure from stopping: a replicated group
//! accepts writes while a quorum of its replicas is current. From the group
//! leader's view only (a follower lists the other followers as not
//! current), per stream: its replicas current (leader included), offline,
//! the most any lags, and its margin, current replicas minus the quorum
//! (0: one more failure stops it; below 0: it accepts nothing). A group no
//! server leads has no current replica: its margin is minus the quorum.
//! The failures a group tolerates by its size (replicas minus quorum) tell
//! an R2 group's margin of 0, which is its design, from an R3 group's,
//! which is a lost replica.
//!
//! Consumers get no series of their own (a series per consumer is 100,000
//! more at 100,000 consumers, for a figure that is the same for most of
//! them): each stream carries the smallest margin of its replicated
//! consumers and how many are at 0 or below; `nats consumer report` names
//! them.

use std::collections::BTreeMap;
use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use crate::sources::jsz::view::{choose, consumer_view, stream_view, View};
use crate::sources::jsz::JszPoll;
use crate::text::families::{gauge_family, Num};

/// One group as the view that counts sees it (see [`GroupView::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupView {
    /// Replicas of the group.
    pub(crate) replicas: u8,
    /// Current replicas, the leader included; 0 with no leader.
    pub(crate) current: u8,
    /// Replicas offline.
    pub(crate) offline: u8,
    /// The most a replica lags, in Raft log entries.
    pub(crate) lag: u64,
    /// Whether a leader gave this view.
    pub(crate) led: bool,
}

impl GroupView {
    /// The view that counts among every polled server's `views` of a group
    /// ([`choose`]): the serving leader's; with none, a view naming no
    /// leader or a leader not yet serving, every replica taken as not
    /// current. `None` for a group of one replica, an entry outside a
    /// cluster, or when only views naming an unpolled leader are there.
    pub(crate) fn of(views: &[View]) -> Option<GroupView> {
        let view = match choose(views).map(|i| &views[i]) {
            Some(View::Claims(c)) => GroupView {
                replicas: c.replicas.listed.saturating_add(1),
                current: c.replicas.current.saturating_add(1),
                offline: c.replicas.offline,
                lag: c.replicas.lag,
                led: true,
            },
            Some(_) => return None,
            None => {
                // Nobody serves: a leaderless view lists every replica,
                // a claimant the others.
                let (r, itself) = views.iter().find_map(|v| match v {
                    View::Leaderless(r) => Some((*r, 0)),
                    View::Claims(c) => Some((c.replicas, 1)),
                    _ => None,
                })?;
                GroupView {
                    replicas: r.listed.saturating_add(itself),
                    current: 0,
                    offline: r.offline,
                    lag: r.lag,
                    led: false,
                }
            }
        };
        (view.replicas > 1).then_some(view)
    }

    /// Current replicas minus the quorum.
    pub(crate) fn margin(&self) -> i64 {
        i64::from(self.current) - self.quorum()
    }

    /// The failures the group survives when all is well, from its size
    /// alone: replicas minus the quorum (R2 0, R3 1, R5 2). Its margin is
    /// this when every replica is current, so a margin of 0 is a loss only
    /// where this is above 0.
    pub(crate) fn failures_tolerated(&self) -> i64 {
        i64::from(self.replicas) - self.quorum()
    }

    fn quorum(&self) -> i64 {
        i64::from(self.replicas) / 2 + 1
    }
}

/// A stream's group and its replicated consumers' groups.
#[derive(Debug, Default)]
pub(crate) struct StreamReplicas<'a> {
    /// The stream's own group.
    pub(crate) stream: Option<GroupView>,
    /// Each replicated consumer's group, by name.
    pub(crate) consumers: BTreeMap<&'a str, GroupView>,
}

/// Every server's views of one stream: its own and its consumers'.
#[derive(Default)]
struct Views<'a> {
    stream: Vec<View<'a>>,
    consumers: BTreeMap<&'a str, Vec<View<'a>>>,
}

/// Every replicated group of every poll, by (account, stream), each from
/// the view that counts ([`GroupView::of`]). `polls[i]` is a server's poll
/// and its name.
pub(crate) fn groups<'a>(
    polls: &[Option<(Option<&'a str>, &'a JszPoll)>],
) -> BTreeMap<(&'a str, &'a str), StreamReplicas<'a>> {
    let mut views: BTreeMap<_, Views> = BTreeMap::new();
    for (server, poll) in polls.iter().flatten() {
        let since = poll.reports_leader_since;
        for acc in &poll.accounts {
            for st in &acc.stream_detail {
                // Entries outside a cluster have no margin: not gathered
                // (a view of each of 100,000 consumers would be held).
                let key = (acc.name.as_str(), st.name.as_str());
                if st.cluster.is_some() {
                    let v = stream_view(st, *server, since);
                    views.entry(key).or_default().stream.push(v);
                }
                for cons in st.consumer_detail.iter().filter(|c| c.cluster.is_some()) {
                    let v = consumer_view(cons, st, *server, since);
                    let entry = views.entry(key).or_default();
                    entry.consumers.entry(&cons.name).or_default().push(v);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    for (key, v) in views {
        let group = StreamReplicas {
            stream: GroupView::of(&v.stream),
            consumers: (v.consumers.into_iter())
                .filter_map(|(name, views)| Some((name, GroupView::of(&views)?)))
                .collect(),
        };
        if group.stream.is_some() || !group.consumers.is_empty() {
            out.insert(key, group);
        }
    }
    out
}

/// How many series [`encode`] writes for `polls` (for the series ceiling).
pub(crate) fn series(polls: &[Option<(Option<&str>, &JszPoll)>]) -> u64 {
    let per_stream = STREAM_FAMILIES.len() as u64;
    (groups(polls).values())
        .map(|g| {
            let consumer_families = CONSUMER_FAMILIES.len() as u64;
            u64::from(g.stream.is_some()) * per_stream
                + consumer_families * u64::from(!g.consumers.is_empty())
        })
        .sum()
}

/// Writes the replica families of every replicated stream in `polls`.
pub(crate) fn encode(
    enc: &mut DescriptorEncoder,
    polls: &[Option<(Option<&str>, &JszPoll)>],
) -> fmt::Result {
    let groups = groups(polls);
    let stream_family =
        |enc: &mut DescriptorEncoder, (name, help): (&str, &str), value: fn(&GroupView) -> Num| {
            let series = groups.iter().filter_map(|((a, s), g)| {
                let v = g.stream.as_ref()?;
                Some(([("account", *a), ("stream", *s)], value(v)))
            });
            gauge_family(enc, name, help, series)
        };
    for (family, value) in STREAM_FAMILIES {
        stream_family(enc, family, value)?;
    }
    let consumer_family = |enc: &mut DescriptorEncoder,
                           (name, help): (&str, &str),
                           value: fn(&BTreeMap<&str, GroupView>) -> Num| {
        let series = (groups.iter())
            .filter(|(_, g)| !g.consumers.is_empty())
            .map(|((a, s), g)| ([("account", *a), ("stream", *s)], value(&g.consumers)));
        gauge_family(enc, name, help, series)
    };
    for (family, value) in CONSUMER_FAMILIES {
        consumer_family(enc, family, value)?;
    }
    Ok(())
}

type ConsumerFamily = (
    (&'static str, &'static str),
    fn(&BTreeMap<&str, GroupView>) -> Num,
);

const CONSUMER_FAMILIES: [ConsumerFamily; 3] = [
    (CONSUMER_MARGIN, |c| {
        Num::I(c.values().map(GroupView::margin).min().unwrap_or(0))
    }),
    (CONSUMERS_EXHAUSTED, |c| {
        Num::U(c.values().filter(|v| v.margin() <= 0).count() as u64)
    }),
    (CONSUMER_TOLERATED, |c| {
        let tolerated = c.values().map(GroupView::failures_tolerated);
        Num::I(tolerated.min().unwrap_or(0))
    }),
];

type StreamFamily = ((&'static str, &'static str), fn(&GroupView) -> Num);

const STREAM_FAMILIES: [StreamFamily; 6] = [
    (
        (
            "nats_delivery_stream_replicas",
            "Replicas of the stream's group (replicated streams only).",
        ),
        |v| Num::U(u64::from(v.replicas)),
    ),
    (
        (
            "nats_delivery_stream_replicas_current",
            "Replicas of the stream that its leader reports current, the leader included; 0 when no server leads it.",
        ),
        |v| Num::U(u64::from(v.current)),
    ),
    (
        (
            "nats_delivery_stream_replicas_offline",
            "Replicas of the stream reported offline.",
        ),
        |v| Num::U(u64::from(v.offline)),
    ),
    (
        (
            "nats_delivery_stream_replica_lag",
            "The most any replica of the stream lags its leader, in Raft log entries.",
        ),
        |v| Num::U(v.lag),
    ),
    (
        (
            "nats_delivery_stream_replica_margin",
            "Current replicas of the stream (leader included) minus its quorum: 0 means one more failure stops it, below 0 it accepts no writes.",
        ),
        |v| Num::I(v.margin()),
    ),
    (
        (
            "nats_delivery_stream_replica_failures_tolerated",
            "Replica failures the stream's group survives when all its replicas are current: replicas minus quorum (R2 0, R3 1, R5 2).",
        ),
        |v| Num::I(v.failures_tolerated()),
    ),
];

const CONSUMER_MARGIN: (&str, &str) = (
    "nats_delivery_stream_consumer_replica_margin_min",
    "The smallest replica margin (current replicas minus quorum, from each leader's view) among the stream's replicated consumers.",
);

const CONSUMER_TOLERATED: (&str, &str) = (
    "nats_delivery_stream_consumer_replica_failures_tolerated_min",
    "The fewest replica failures any of the stream's replicated consumers survives when all its replicas are current (replicas minus quorum; 0 with an R2 consumer).",
);

const CONSUMERS_EXHAUSTED: (&str, &str) = (
    "nats_delivery_stream_consumers_without_replica_margin",
    "Replicated consumers of the stream whose replica margin is 0 or below (one failure from stopping, or stopped).",
);

#[cfg(test)]
#[path = "replicas_tests.rs"]
mod tests;
