//! `/varz`: server-wide totals. The slow-consumer counters here are running
//! totals since the server started, so they are exported as counters (a
//! restart of the server is a counter reset, which `increase()` handles).

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use serde::Deserialize;

use super::{MonitoringSource, NatsOption, TargetSnapshot};
use super::{ServerLink, Source};
use crate::poll_error::PollError;
use crate::text::families::{counter_family, gauge_family};

/// The fields of a `/varz` reply the exporter uses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Varz {
    /// Unique, regenerated at every start unless configured.
    pub(crate) server_id: String,
    /// `server_name`; equals `server_id` when the operator set none.
    pub(crate) server_name: String,
    /// Version string.
    pub(crate) version: String,
    /// Current client connections.
    pub(crate) connections: u64,
    /// Messages received from clients and other servers.
    pub(crate) in_msgs: u64,
    /// Messages sent.
    pub(crate) out_msgs: u64,
    /// Bytes received.
    pub(crate) in_bytes: u64,
    /// Bytes sent.
    pub(crate) out_bytes: u64,
    /// Connections of every kind cut as slow consumers since start.
    pub(crate) slow_consumers: Option<u64>,
    /// The same by connection kind (2.10+).
    pub(crate) slow_consumer_stats: Option<PerKind>,
    /// Connections closed as stale (missed pings) by kind (2.12+).
    pub(crate) stale_connection_stats: Option<PerKind>,
    /// Times a producer was stalled because a consumer fell behind (2.12+).
    pub(crate) stalled_clients: Option<u64>,
    /// Pending bytes at which the server cuts a connection.
    pub(crate) max_pending: Option<i64>,
    /// Write deadline in nanoseconds.
    pub(crate) write_deadline: Option<i64>,
}

/// Counts by connection kind, as in `slow_consumer_stats`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PerKind {
    /// Client connections.
    pub(crate) clients: u64,
    /// Route connections (cluster).
    pub(crate) routes: u64,
    /// Gateway connections (super-cluster).
    pub(crate) gateways: u64,
    /// Leaf node connections.
    pub(crate) leafs: u64,
}

impl PerKind {
    fn by_kind(&self) -> [(&'static str, u64); 4] {
        [
            ("client", self.clients),
            ("route", self.routes),
            ("gateway", self.gateways),
            ("leaf", self.leafs),
        ]
    }
}

impl Varz {
    /// The `server` label: server_name, falling back to server_id.
    pub fn server_label(&self) -> Option<&str> {
        [self.server_name.as_str(), self.server_id.as_str()]
            .into_iter()
            .find(|s| !s.is_empty())
    }
}

/// Reads the server's `/varz`.
pub(crate) async fn poll(link: &ServerLink<'_>) -> Result<Varz, PollError> {
    link.get_json(Source::Varz, &[]).await
}

/// The `/varz` source of one server.
#[derive(Debug, Default)]
pub(crate) struct VarzSource;

impl MonitoringSource for VarzSource {
    type Reply = Varz;
    const HELP: &'static str = "`/varz`: server totals, slow consumers by kind, stalls, limits";
    const NATS_OPTIONS: &'static [NatsOption] = &[];

    fn source(&self) -> Source {
        Source::Varz
    }

    fn poll<'a>(
        &'a self,
        link: &'a ServerLink<'a>,
    ) -> impl std::future::Future<Output = Result<Varz, PollError>> + Send + 'a {
        poll(link)
    }

    /// The server's name and `max_pending` replace the last ones known only
    /// when this reply has them.
    fn absorb(&self, varz: Varz, snap: &mut TargetSnapshot) {
        if let Some(name) = varz.server_label() {
            snap.server_name = Some(name.to_string());
        }
        if !varz.version.is_empty() {
            snap.server_version = Some(varz.version.clone());
        }
        if varz.max_pending.is_some() {
            snap.max_pending = varz.max_pending;
        }
        snap.varz = Some(varz);
    }
}

/// Writes this source's families for the servers of one scrape.
pub(crate) fn encode_targets(
    enc: &mut DescriptorEncoder,
    targets: &[TargetSnapshot],
) -> fmt::Result {
    encode(enc, &super::answered(targets, |t| t.varz.as_ref()))
}

/// Writes every /varz family for the servers polled successfully.
pub(crate) fn encode(enc: &mut DescriptorEncoder, servers: &[(&str, &Varz)]) -> fmt::Result {
    encode_identity_and_cuts(enc, servers)?;
    encode_limits_and_traffic(enc, servers)
}

/// One series per server of what `f` gives, where it gives a value.
fn each<'a>(
    servers: &'a [(&'a str, &'a Varz)],
    f: fn(&Varz) -> Option<u64>,
) -> impl Iterator<Item = ([(&'static str, &'a str); 1], u64)> + 'a {
    servers
        .iter()
        .filter_map(move |(s, v)| f(v).map(|x| ([("server", *s)], x)))
}

/// The server's identity, and the connections it cut or stalled.
fn encode_identity_and_cuts(enc: &mut DescriptorEncoder, servers: &[(&str, &Varz)]) -> fmt::Result {
    gauge_family(
        enc,
        "nats_delivery_server_info",
        "Server identity; always 1.",
        servers.iter().map(|(s, v)| {
            (
                [
                    ("server", *s),
                    ("server_id", v.server_id.as_str()),
                    ("version", v.version.as_str()),
                ],
                1u64,
            )
        }),
    )?;
    counter_family(
        enc,
        "nats_delivery_server_slow_consumers",
        "Connections of every kind the server cut as slow consumers since it started.",
        each(servers, |v| v.slow_consumers),
    )?;
    let by_kind = |f: fn(&Varz) -> Option<PerKind>| {
        servers.iter().flat_map(move |(s, v)| {
            f(v).into_iter()
                .flat_map(|k| k.by_kind())
                .map(move |(kind, n)| ([("server", *s), ("kind", kind)], n))
        })
    };
    counter_family(
        enc,
        "nats_delivery_server_slow_consumers_by_kind",
        "Connections cut as slow consumers since the server started, by connection kind (2.10+).",
        by_kind(|v| v.slow_consumer_stats),
    )?;
    counter_family(
        enc,
        "nats_delivery_server_stale_connections_by_kind",
        "Connections closed as stale (no answer to pings) since the server started, by kind (2.12+).",
        by_kind(|v| v.stale_connection_stats),
    )?;
    counter_family(
        enc,
        "nats_delivery_server_stalled_clients",
        "Times the server stalled a fast producer because a consumer fell behind (2.12+).",
        each(servers, |v| v.stalled_clients),
    )
}

/// The limits at which the server cuts a connection, and its traffic.
fn encode_limits_and_traffic(
    enc: &mut DescriptorEncoder,
    servers: &[(&str, &Varz)],
) -> fmt::Result {
    gauge_family(
        enc,
        "nats_delivery_server_max_pending_bytes",
        "Pending bytes at which the server cuts a connection as a slow consumer.",
        servers
            .iter()
            .filter_map(|(s, v)| v.max_pending.map(|x| ([("server", *s)], x))),
    )?;
    gauge_family(
        enc,
        "nats_delivery_server_write_deadline_seconds",
        "Time a write to a connection may take before the server cuts it as a slow consumer.",
        servers.iter().filter_map(|(s, v)| {
            v.write_deadline
                .map(|ns| ([("server", *s)], ns as f64 / 1e9))
        }),
    )?;
    gauge_family(
        enc,
        "nats_delivery_server_connections",
        "Client connections open now.",
        each(servers, |v| Some(v.connections)),
    )?;
    counter_family(
        enc,
        "nats_delivery_server_in_messages",
        "Messages the server received.",
        each(servers, |v| Some(v.in_msgs)),
    )?;
    counter_family(
        enc,
        "nats_delivery_server_out_messages",
        "Messages the server sent.",
        each(servers, |v| Some(v.out_msgs)),
    )?;
    counter_family(
        enc,
        "nats_delivery_server_in_bytes",
        "Bytes the server received.",
        each(servers, |v| Some(v.in_bytes)),
    )?;
    counter_family(
        enc,
        "nats_delivery_server_out_bytes",
        "Bytes the server sent.",
        each(servers, |v| Some(v.out_bytes)),
    )
}
