//! Whose view of a replicated group counts: the one rule the exported
//! streams and consumers ([`super::leaders`]) and the replica margins
//! (`jetstream/replicas.rs`) both follow.
//!
//! Every server that holds a replica of a stream or consumer lists it in its
//! `/jsz`, each with its own figures; only a serving leader's are the
//! group's state (a follower's `num_pending` is 0, its ack floor lags).
//! [`view`] reads what one server says of one group; [`choose`] picks,
//! over every polled server's view of that group, the one that counts.

use super::replicas::ReplicaCounts;
use super::{ClusterInfo, ConsumerInfo, StreamDetail};

/// A claim of leadership: what the claimant says of itself and its group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Claim<'a> {
    /// The claimant's name.
    pub(crate) server: &'a str,
    /// When it became leader (`leader_since`, 2.11+), Unix seconds; NaN
    /// when not given.
    pub(crate) since: f64,
    /// Whether it serves as leader: on a server that reports
    /// `leader_since`, a Raft leader listing replicas without one has not
    /// yet applied its log nor told the stream or consumer, which still
    /// answers with a follower's figures. (A group without a Raft node, on
    /// a server outside a cluster, names its server with neither.)
    pub(crate) serving: bool,
    /// The replicas its own list holds (the others).
    pub(crate) replicas: ReplicaCounts,
}

/// One server's view of one group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum View<'a> {
    /// No cluster block: a server outside a cluster, or one still
    /// recovering after a restart (with its figures of before).
    Unclustered,
    /// The server names itself the leader.
    Claims(Claim<'a>),
    /// The server names another server (or its own name is unknown).
    LedBy(&'a str),
    /// The server names no leader; it lists every replica, itself included.
    Leaderless(ReplicaCounts),
}

/// What `server` (its name, when known) says of a group whose cluster block
/// is `cluster`; `reports_since` says whether the server sends
/// `leader_since` (2.11+).
pub(crate) fn view<'a>(
    cluster: Option<&'a ClusterInfo>,
    server: Option<&'a str>,
    reports_since: bool,
) -> View<'a> {
    let Some(c) = cluster else {
        return View::Unclustered;
    };
    match server {
        _ if c.leader.is_empty() => View::Leaderless(c.replicas),
        Some(s) if *c.leader == *s => View::Claims(Claim {
            server: s,
            since: c.leader_since,
            serving: !reports_since || !c.leader_since.is_nan() || c.replicas.listed == 0,
            replicas: c.replicas,
        }),
        _ => View::LedBy(&c.leader),
    }
}

/// [`view`] of stream `s` by `server`.
pub(crate) fn stream_view<'a>(
    s: &'a StreamDetail,
    server: Option<&'a str>,
    reports_since: bool,
) -> View<'a> {
    view(s.cluster.as_ref(), server, reports_since)
}

/// [`view`] of consumer `c` of stream `s` by `server`; before 2.11 (no
/// `leader_since`) a claim is not serving when its figures are a
/// follower's ([`serves`]). From 2.11 on `leader_since` tells, and a
/// serving leader's `num_pending` can be 0 with messages above the
/// committed delivered position for a moment after a delivery, which the
/// check would take for a follower's.
pub(crate) fn consumer_view<'a>(
    c: &'a ConsumerInfo,
    s: &StreamDetail,
    server: Option<&'a str>,
    reports_since: bool,
) -> View<'a> {
    match view(c.cluster.as_ref(), server, reports_since) {
        View::Claims(claim) => View::Claims(Claim {
            serving: claim.serving && (reports_since || serves(c, s)),
            ..claim
        }),
        other => other,
    }
}

/// Whether a consumer's claim, with its server's own entry of the stream,
/// gives a serving leader's figures. A leader that has not yet taken over
/// answers with a follower's `num_pending` of 0: for a consumer without a
/// subject filter that is impossible while its own server stores messages
/// above the delivered position (more sequences there than interior
/// deletes in the whole stream).
pub(crate) fn serves(c: &ConsumerInfo, stream: &StreamDetail) -> bool {
    let unfiltered = c.config.as_ref().is_some_and(|k| k.filters().is_empty());
    if !unfiltered || c.num_pending > 0 {
        return true;
    }
    let s = &stream.state;
    let from = c.delivered.stream_seq.max(s.first_seq.saturating_sub(1));
    s.last_seq.saturating_sub(from) <= s.num_deleted
}

/// Which of the polled servers' `views` of one group counts, as an index
/// into `views`; `None` when none does (no serving leader was polled).
///
/// - A claim counts only while its server serves as leader
///   ([`Claim::serving`]), and not with an empty replica list when another
///   server lists replicas (a server that has not yet made the group's Raft
///   node names itself with no replicas).
/// - Among several claims: a claim whose own list marks no replica current
///   while another's does is stale (a frozen leader resumed) and loses; then
///   the most servers naming the claimant win, then the latest
///   `leader_since`, then the most current marks, then the first polled.
/// - No claim: an entry without cluster block counts only when no server
///   lists the group with one (servers outside a cluster); a leaderless
///   view, a view naming another server, never.
pub(crate) fn choose(views: &[View]) -> Option<usize> {
    let lists_replicas = views.iter().any(|v| match v {
        View::Claims(c) => c.replicas.listed > 0,
        View::LedBy(_) | View::Leaderless(_) => true,
        View::Unclustered => false,
    });
    let claims: Vec<(usize, &Claim)> = (views.iter().enumerate())
        .filter_map(|(i, v)| match v {
            View::Claims(c) if c.serving && (c.replicas.listed > 0 || !lists_replicas) => {
                Some((i, c))
            }
            _ => None,
        })
        .collect();
    if claims.is_empty() {
        let clustered = views.iter().any(|v| !matches!(v, View::Unclustered));
        return (!clustered && !views.is_empty()).then_some(0);
    }
    if claims.len() == 1 {
        return Some(claims[0].0);
    }
    let current = |c: &Claim| c.replicas.current;
    let any_current = claims.iter().any(|(_, c)| current(c) > 0);
    let votes = |c: &Claim| {
        (views.iter())
            .filter(|v| match v {
                View::Claims(o) => o.server == c.server,
                View::LedBy(name) => *name == c.server,
                _ => false,
            })
            .count()
    };
    let since = |c: &Claim| {
        if c.since.is_nan() {
            f64::NEG_INFINITY
        } else {
            c.since
        }
    };
    claims
        .iter()
        .filter(|(_, c)| !any_current || current(c) > 0)
        .max_by(|(i, a), (j, b)| {
            (votes(a).cmp(&votes(b)))
                .then(since(a).total_cmp(&since(b)))
                .then(current(a).cmp(&current(b)))
                .then(j.cmp(i))
        })
        .map(|(i, _)| *i)
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
