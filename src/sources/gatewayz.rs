//! `/gatewayz`: the super-cluster's gateway connections, outbound (one per
//! remote gateway) and inbound (one per remote server connected to this
//! one), and the bytes each holds in its outbound buffer
//! (`connection.pending_bytes`), shown against the server's `max_pending`
//! (see `super::link_pending` for what the limit does to a gateway). A
//! server without gateways answers with empty maps.

use std::collections::BTreeMap;
use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use super::{link_pending, ServerLink, Source};
use super::{MonitoringSource, NatsOption, TargetSnapshot};
use crate::poll_error::PollError;

/// The fields of a `/gatewayz` reply the exporter uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Gatewayz {
    /// By remote gateway name: this server's connection to it.
    pub(crate) outbound_gateways: BTreeMap<String, RemoteGateway>,
    /// By remote gateway name: the connections its servers made to this one.
    pub(crate) inbound_gateways: BTreeMap<String, Vec<RemoteGateway>>,
}

/// One gateway connection (the server leaves `connection` out while none is up).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RemoteGateway {
    /// The connection, as in `/connz`.
    pub(crate) connection: Option<GatewayConnection>,
}

/// The fields of a gateway's connection the exporter uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct GatewayConnection {
    /// Connection id, unique within one server process.
    pub(crate) cid: u64,
    /// Bytes waiting to be written to the remote gateway.
    pub(crate) pending_bytes: i64,
}

/// One gateway connection as exported: label values and pending bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayPending {
    /// The remote gateway's (cluster's) name.
    pub(crate) gateway: String,
    /// `outbound` or `inbound`.
    pub(crate) direction: &'static str,
    /// The connection's id.
    pub(crate) cid: String,
    /// Bytes waiting to be written.
    pub(crate) pending_bytes: i64,
}

impl Gatewayz {
    /// Every gateway connection, outbound ones first, each direction by name.
    pub fn connections(self) -> Vec<GatewayPending> {
        let one = |gateway: &str, direction, c: GatewayConnection| GatewayPending {
            gateway: gateway.to_string(),
            direction,
            cid: c.cid.to_string(),
            pending_bytes: c.pending_bytes,
        };
        let outbound = self
            .outbound_gateways
            .iter()
            .filter_map(|(name, g)| Some(one(name, "outbound", g.connection.clone()?)));
        let inbound = self.inbound_gateways.iter().flat_map(|(name, list)| {
            list.iter()
                .filter_map(move |g| Some(one(name, "inbound", g.connection.clone()?)))
        });
        outbound.chain(inbound).collect()
    }
}

/// The `/gatewayz` source of one server.
#[derive(Debug, Default)]
pub(crate) struct GatewayzSource;

impl MonitoringSource for GatewayzSource {
    type Reply = Gatewayz;
    const HELP: &'static str =
        "`/gatewayz`: pending bytes of each gateway connection (super-cluster)";
    const NATS_OPTIONS: &'static [NatsOption] = &[];

    fn source(&self) -> Source {
        Source::Gatewayz
    }

    fn poll<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> impl std::future::Future<Output = Result<Gatewayz, PollError>> + Send + 'a {
        link.get_json(Source::Gatewayz, &[])
    }

    fn absorb(&self, reply: Gatewayz, snap: &mut TargetSnapshot) {
        snap.gateways = Some(reply.connections());
    }
}

/// Writes this source's families for the servers of one scrape.
pub(crate) fn encode_targets(
    enc: &mut DescriptorEncoder,
    targets: &[TargetSnapshot],
) -> fmt::Result {
    let gateways: Vec<_> = targets
        .iter()
        .filter_map(|t| Some((t.server.as_str(), t.max_pending, t.gateways.as_deref()?)))
        .collect();
    encode(enc, &gateways)
}

/// Writes each gateway connection's pending bytes and their ratio to
/// `max_pending`, for (server, its `max_pending`, its gateway connections).
pub(crate) fn encode(
    enc: &mut DescriptorEncoder,
    servers: &[(&str, Option<i64>, &[GatewayPending])],
) -> fmt::Result {
    let rows: Vec<_> = servers
        .iter()
        .flat_map(|(server, max, gateways)| {
            gateways.iter().map(move |g| {
                let labels = vec![
                    ("gateway", g.gateway.as_str()),
                    ("direction", g.direction),
                    ("cid", g.cid.as_str()),
                ];
                (*server, *max, (labels, g.pending_bytes))
            })
        })
        .collect();
    link_pending::encode(
        enc,
        "nats_delivery_gateway",
        [
            "Bytes waiting to be written to a gateway connection (super-cluster).",
            "Pending bytes of a gateway connection as a fraction of max_pending; above 0.75 the server stalls client publishers sending through it.",
        ],
        &rows,
    )
}
