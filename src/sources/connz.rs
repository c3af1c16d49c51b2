//! `/connz`: the early warning (connections whose pending bytes approach
//! `max_pending`) and the names of connections the server cut as slow
//! consumers (`state=closed`, which the server keeps in a ring of 10,000).
//!
//! Closed connections are read newest first (`sort=stop`) and each is counted
//! once: a poll reads until it meets a connection it already counted, so
//! nothing is missed between polls as long as the ring has not overflowed
//! (then everything in the ring is new, and is counted).

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Mutex;

use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use super::{MonitoringSource, NatsOption, TargetSnapshot};
use super::{ServerLink, Source};
use crate::lock::LockOrRecover;
use crate::poll_error::PollError;
use crate::text::families::{counter_family, gauge_family};

/// Closed connections asked for by the first request of a poll: between two
/// scrapes few connections close, and the ring behind them can hold 10,000.
const CLOSED_FIRST_PAGE: usize = 50;
/// Closed connections asked for by each further request.
const CLOSED_PAGE: usize = 1000;
/// The size of the server's ring of closed connections.
const CLOSED_RING: usize = 10_000;
/// The label value that stands for client names past the configured cap.
pub(crate) const OVERFLOW_NAME: &str = "__overflow__";

/// The fields of a `/connz` reply the exporter uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Connz {
    /// The server process answering.
    pub(crate) server_id: String,
    /// The connections on this page.
    pub(crate) connections: Vec<ConnInfo>,
}

/// One connection.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ConnInfo {
    /// Connection id, unique within one server process.
    pub(crate) cid: u64,
    /// The name the client gave, often empty.
    pub(crate) name: String,
    /// The account the connection is bound to.
    pub(crate) account: String,
    /// Bytes waiting to be written to the client.
    pub(crate) pending_bytes: i64,
    /// Why a closed connection was closed.
    pub(crate) reason: String,
}

/// The name the server gives the default account, which `/connz` leaves out.
const GLOBAL_ACCOUNT: &str = "$G";

impl ConnInfo {
    /// `/connz?auth=true` names the account except the default one.
    fn with_account(mut self) -> ConnInfo {
        if self.account.is_empty() {
            self.account = GLOBAL_ACCOUNT.to_string();
        }
        self
    }
}

/// The most-pending connections of one server, from one poll.
#[derive(Debug, Clone, Default)]
pub(crate) struct TopPending {
    /// Connections, most pending first.
    pub(crate) connections: Vec<ConnInfo>,
}

/// Reads the `top` connections with the most pending bytes.
pub(crate) async fn poll_top_pending(
    link: &ServerLink<'_>,
    top: u32,
) -> Result<TopPending, PollError> {
    let query = [
        ("sort", "pending".into()),
        ("limit", top.to_string()),
        ("auth", "true".into()),
    ];
    let reply: Connz = link.get_json(Source::Connz, &query).await?;
    Ok(TopPending {
        connections: reply
            .connections
            .into_iter()
            .map(ConnInfo::with_account)
            .collect(),
    })
}

/// The label value for a slow-consumer close reason, or `None` for other reasons.
pub(crate) fn slow_consumer_reason(reason: &str) -> Option<&'static str> {
    match reason {
        "Slow Consumer (Pending Bytes)" => Some("pending_bytes"),
        "Slow Consumer (Write Deadline)" => Some("write_deadline"),
        r if r.starts_with("Slow Consumer") => Some("other"),
        _ => None,
    }
}

/// Key of one series of `nats_delivery_slow_consumer_closed_connections_total`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ClosedKey {
    /// `server` label.
    pub(crate) server: String,
    /// `account` label.
    pub(crate) account: String,
    /// `client_name` label (empty when the client gave none).
    pub(crate) client_name: String,
    /// `reason` label.
    pub(crate) reason: &'static str,
}

/// Remembers, per server, which closed connections were already counted.
#[derive(Debug, Default)]
pub(crate) struct ClosedTracker {
    server_id: String,
    /// Cids of the newest closed connections seen at the last poll.
    newest: HashSet<u64>,
    names: HashSet<(String, String)>,
    /// Totals by series; they only ever grow.
    pub(crate) counts: BTreeMap<ClosedKey, u64>,
}

/// New closed connections found by one poll, not yet applied.
#[derive(Debug)]
pub(crate) struct ClosedPoll {
    server_id: String,
    newest: HashSet<u64>,
    new: Vec<ConnInfo>,
}

/// Reads closed connections newer than the ones `known` holds. Nothing is
/// counted until [`ClosedTracker::apply`], so a poll that fails half-way
/// counts nothing twice.
pub(crate) async fn poll_closed(
    link: &ServerLink<'_>,
    known: (String, HashSet<u64>),
) -> Result<ClosedPoll, PollError> {
    let (known_server, known_cids) = known;
    let mut new = Vec::new();
    let mut newest = HashSet::new();
    let mut server_id = String::new();
    let mut offset = 0;
    let mut page = CLOSED_FIRST_PAGE;
    'pages: while offset < CLOSED_RING {
        let query = [
            ("state", "closed".into()),
            ("sort", "stop".into()),
            ("limit", page.to_string()),
            ("offset", offset.to_string()),
            ("auth", "true".into()),
        ];
        let reply: Connz = link.get_json(Source::Connz, &query).await?;
        if server_id.is_empty() {
            server_id = reply.server_id.clone();
        }
        let same_process = reply.server_id == known_server;
        let len = reply.connections.len();
        for c in reply.connections {
            if same_process && known_cids.contains(&c.cid) {
                break 'pages;
            }
            if newest.len() < 64 {
                newest.insert(c.cid);
            }
            new.push(c.with_account());
        }
        if len < page {
            break;
        }
        offset += page;
        page = CLOSED_PAGE;
    }
    if newest.is_empty() && server_id == known_server {
        newest = known_cids;
    }
    Ok(ClosedPoll {
        server_id,
        newest,
        new,
    })
}

impl ClosedTracker {
    /// What a poll needs to know to stop at connections already counted.
    pub(crate) fn known(&self) -> (String, HashSet<u64>) {
        (self.server_id.clone(), self.newest.clone())
    }

    /// Counts the slow consumers among newly closed connections.
    pub(crate) fn apply(&mut self, poll: ClosedPoll, server: &str, max_names: usize) {
        self.server_id = poll.server_id;
        self.newest = poll.newest;
        for c in poll.new {
            let Some(reason) = slow_consumer_reason(&c.reason) else {
                continue;
            };
            let pair = (c.account.clone(), c.name.clone());
            let client_name = if self.names.contains(&pair) || c.name.is_empty() {
                c.name
            } else if self.names.len() < max_names {
                self.names.insert(pair);
                c.name
            } else {
                OVERFLOW_NAME.to_string()
            };
            let key = ClosedKey {
                server: server.to_string(),
                account: c.account,
                client_name,
                reason,
            };
            *self.counts.entry(key).or_default() += 1;
        }
    }
}

/// The `/connz` source of one server: the top connections by pending bytes
/// and the connections it cut as slow consumers, counted once each.
#[derive(Debug)]
pub(crate) struct ConnzSource {
    top: u32,
    max_names: usize,
    closed: Mutex<ClosedTracker>,
    /// This poll's closed connections, applied once the server's label is known.
    unapplied: Mutex<Option<ClosedPoll>>,
}

impl ConnzSource {
    /// Lists `top` connections by pending bytes and keeps at most
    /// `max_names` distinct (account, client name) pairs.
    pub(crate) fn new(top: u32, max_names: usize) -> ConnzSource {
        ConnzSource {
            top,
            max_names,
            closed: Mutex::default(),
            unapplied: Mutex::default(),
        }
    }
}

impl MonitoringSource for ConnzSource {
    type Reply = (TopPending, ClosedPoll);
    const HELP: &'static str =
        "`/connz`: connections closest to `max_pending`, connections cut as slow consumers";
    const NATS_OPTIONS: &'static [NatsOption] = &[
        NatsOption::text("sort"),
        NatsOption::number("limit"),
        NatsOption::number("offset"),
        NatsOption::flag("auth"),
        // The server's ConnState.
        NatsOption::choice("state", &[("open", 0), ("closed", 1), ("all", 2)]),
    ];

    fn source(&self) -> Source {
        Source::Connz
    }

    fn poll<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> impl std::future::Future<Output = Result<Self::Reply, PollError>> + Send + 'a {
        let known = self.closed.lock_or_recover().known();
        async move {
            let top = poll_top_pending(link, self.top).await?;
            let closed = poll_closed(link, known).await?;
            Ok((top, closed))
        }
    }

    fn absorb(&self, (top, closed): Self::Reply, snap: &mut TargetSnapshot) {
        snap.top_pending = Some(top);
        *self.unapplied.lock_or_recover() = Some(closed);
    }

    /// Counts this poll's cut connections under the settled `server` label;
    /// the counts so far go into the snapshot even when this poll failed.
    fn finish(&self, snap: &mut TargetSnapshot) {
        let mut tracker = self.closed.lock_or_recover();
        if let Some(closed) = self.unapplied.lock_or_recover().take() {
            tracker.apply(closed, &snap.server, self.max_names);
        }
        snap.closed = tracker.counts.clone();
    }
}

/// Writes this source's families for the servers of one scrape.
pub(crate) fn encode_targets(
    enc: &mut DescriptorEncoder,
    targets: &[TargetSnapshot],
) -> fmt::Result {
    let top: Vec<_> = targets
        .iter()
        .filter_map(|t| {
            t.top_pending
                .as_ref()
                .map(|p| (t.server.as_str(), p, t.max_pending))
        })
        .collect();
    encode_top(enc, &top)?;
    let mut closed = BTreeMap::new();
    for t in targets {
        for (k, n) in &t.closed {
            *closed.entry(k.clone()).or_insert(0) += n;
        }
    }
    encode_closed(enc, &closed)
}

/// Writes the pending-bytes gauges for each server's top connections, with
/// the ratio to that server's `max_pending` where it is known.
pub(crate) fn encode_top(
    enc: &mut DescriptorEncoder,
    servers: &[(&str, &TopPending, Option<i64>)],
) -> fmt::Result {
    let rows = || {
        servers
            .iter()
            .flat_map(|(s, top, max)| top.connections.iter().map(move |c| (*s, c, *max)))
    };
    let cids: Vec<String> = rows().map(|(_, c, _)| c.cid.to_string()).collect();
    gauge_family(
        enc,
        "nats_delivery_connection_pending_bytes",
        "Bytes waiting to be written to a connection, for the connections with the most pending per server.",
        rows().zip(&cids).map(|((s, c, _), cid)| {
            (
                [("server", s), ("cid", cid.as_str()), ("client_name", c.name.as_str()), ("account", c.account.as_str())],
                c.pending_bytes,
            )
        }),
    )?;
    gauge_family(
        enc,
        "nats_delivery_connection_pending_ratio",
        "Pending bytes of a connection as a fraction of max_pending; at 1 the server cuts it.",
        rows().zip(&cids).filter_map(|((s, c, max), cid)| {
            let max = max.filter(|m| *m > 0)?;
            Some((
                [
                    ("server", s),
                    ("cid", cid.as_str()),
                    ("client_name", c.name.as_str()),
                    ("account", c.account.as_str()),
                ],
                c.pending_bytes as f64 / max as f64,
            ))
        }),
    )
}

/// Writes the running count of connections cut as slow consumers.
pub(crate) fn encode_closed(
    enc: &mut DescriptorEncoder,
    counts: &BTreeMap<ClosedKey, u64>,
) -> fmt::Result {
    counter_family(
        enc,
        "nats_delivery_slow_consumer_closed_connections",
        "Connections the server closed as slow consumers, seen in /connz?state=closed, each counted once.",
        counts.iter().map(|(k, n)| {
            (
                [
                    ("server", k.server.as_str()),
                    ("account", k.account.as_str()),
                    ("client_name", k.client_name.as_str()),
                    ("reason", k.reason),
                ],
                *n,
            )
        }),
    )
}

#[cfg(test)]
#[path = "connz_tests.rs"]
mod tests;
