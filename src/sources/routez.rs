//! `/routez`: the cluster's route connections and the bytes each holds in its
//! outbound buffer (`pending_size`), shown against the server's
//! `max_pending` (see `super::link_pending` for what the limit does to a
//! route). A server without a cluster answers with no routes. Servers before
//! 2.10.26 always write 0 there, so their routes are not exported; the
//! server's version comes from `/varz`.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use super::{link_pending, ServerLink, Source};
use super::{MonitoringSource, NatsOption, TargetSnapshot};
use crate::poll_error::PollError;

/// The fields of a `/routez` reply the exporter uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Routez {
    /// One entry per route connection; with route pooling (2.10+) several
    /// per remote server.
    pub routes: Vec<RouteInfo>,
}

/// One route connection.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RouteInfo {
    /// Connection id, unique within one server process.
    pub(crate) rid: u64,
    /// The remote server's id.
    pub(crate) remote_id: String,
    /// The remote server's name (2.10+).
    pub(crate) remote_name: String,
    /// Bytes waiting to be written to the remote server.
    pub(crate) pending_size: i64,
}

/// One route connection as exported: label values and pending bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePending {
    /// The remote server's name, or its id when the server does not say (2.9).
    pub(crate) remote: String,
    /// The route's connection id.
    pub(crate) rid: String,
    /// Bytes waiting to be written.
    pub(crate) pending_bytes: i64,
}

impl From<RouteInfo> for RoutePending {
    fn from(r: RouteInfo) -> RoutePending {
        let remote = if r.remote_name.is_empty() {
            r.remote_id
        } else {
            r.remote_name
        };
        RoutePending {
            remote,
            rid: r.rid.to_string(),
            pending_bytes: r.pending_size,
        }
    }
}

/// The `/routez` source of one server.
#[derive(Debug, Default)]
pub(crate) struct RoutezSource;

impl MonitoringSource for RoutezSource {
    type Reply = Routez;
    const HELP: &'static str = "`/routez`: pending bytes of each route connection (cluster)";
    const NATS_OPTIONS: &'static [NatsOption] = &[];

    fn source(&self) -> Source {
        Source::Routez
    }

    fn poll<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> impl std::future::Future<Output = Result<Routez, PollError>> + Send + 'a {
        link.get_json(Source::Routez, &[])
    }

    fn absorb(&self, reply: Routez, snap: &mut TargetSnapshot) {
        snap.routes = Some(reply.routes.into_iter().map(RoutePending::from).collect());
    }

    /// Leaves the routes out unless the server is known to fill
    /// `pending_size`: before, its 0 means "not reported", not "nothing waits".
    fn finish(&self, snap: &mut TargetSnapshot) {
        if !snap
            .server_version
            .as_deref()
            .is_some_and(reports_route_pending)
        {
            snap.routes = None;
        }
    }
}

/// Whether `/routez` of a server of this version fills `pending_size`: from
/// 2.10.26 and 2.11.0 on. Earlier servers declare the field and always write
/// 0 (`Routez` in `server/monitor.go` never set it), whatever the route holds.
pub(crate) fn reports_route_pending(version: &str) -> bool {
    super::version_at_least(version, (2, 10, 26))
}

/// Writes this source's families for the servers of one scrape.
pub(crate) fn encode_targets(
    enc: &mut DescriptorEncoder,
    targets: &[TargetSnapshot],
) -> fmt::Result {
    let routes: Vec<_> = targets
        .iter()
        .filter_map(|t| Some((t.server.as_str(), t.max_pending, t.routes.as_deref()?)))
        .collect();
    encode(enc, &routes)
}

/// Writes each route's pending bytes and their ratio to `max_pending`, for
/// (server, its `max_pending`, its routes).
pub(crate) fn encode(
    enc: &mut DescriptorEncoder,
    servers: &[(&str, Option<i64>, &[RoutePending])],
) -> fmt::Result {
    let rows: Vec<_> = servers
        .iter()
        .flat_map(|(server, max, routes)| {
            routes.iter().map(move |r| {
                let labels = vec![("remote", r.remote.as_str()), ("rid", r.rid.as_str())];
                (*server, *max, (labels, r.pending_bytes))
            })
        })
        .collect();
    link_pending::encode(
        enc,
        "nats_delivery_route",
        [
            "Bytes waiting to be written to a route connection (cluster).",
            "Pending bytes of a route connection as a fraction of max_pending; above 0.75 the server stalls client publishers sending through it.",
        ],
        &rows,
    )
}
