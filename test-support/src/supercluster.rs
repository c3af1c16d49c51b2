//! Super-clusters: clusters of JetStream servers joined to each other by
//! gateways, for tests of what reaches every server of a deployment (the
//! system account's requests, gateway connections).

use crate::cluster::formed;
use crate::{free_port, NatsServer};

/// Starts one cluster per `(name, size)`, its servers routed to each other
/// and every cluster joined to every other by gateways, all on loopback.
///
/// Servers are named by their cluster's name in lower case and their index
/// (`a0`, `a1`, `b0`, ...), so names are unique across the super-cluster as
/// long as cluster names are. Every server has JetStream, `config` added
/// (accounts and the like: the system account must be the same everywhere)
/// and listens for leaf node connections (see [`NatsServer::leafnode_port`]).
///
/// The whole topology is written into every server's configuration, as
/// nats-server's own super-cluster tests do: every route and gateway port is
/// chosen in advance ([`free_port`], below the ephemeral range), each server
/// lists every route of its cluster and every gateway of the others. A
/// JetStream server sizes its new meta group from those lists, so each one
/// boots expecting all servers; with only seeds listed, the servers of
/// different clusters booted expecting groups of different sizes. Returns
/// the servers cluster by cluster, in the order given, once their one meta
/// group has formed (started again if it does not, see `formed`).
pub fn supercluster(clusters: &[(&str, usize)], config: &str) -> Vec<Vec<NatsServer>> {
    let what = format!("a super-cluster of {clusters:?}");
    formed(&what, || {
        let ports: Vec<Vec<(u16, u16)>> = clusters
            .iter()
            .map(|(_, size)| (0..*size).map(|_| (free_port(), free_port())).collect())
            .collect();
        let urls = |scheme: &str, ports: &[(u16, u16)], gateway: bool| {
            ports
                .iter()
                .map(|(route, gw)| {
                    format!(
                        "\"{scheme}://127.0.0.1:{}\"",
                        if gateway { gw } else { route }
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        clusters
            .iter()
            .zip(&ports)
            .map(|((name, _), own)| {
                let routes = urls("nats-route", own, false);
                let gateways = clusters
                    .iter()
                    .zip(&ports)
                    .filter(|((other, _), _)| other != name)
                    .map(|((other, _), theirs)| {
                        format!("{{ name: {other}, urls: [{}] }}", urls("nats", theirs, true))
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                own.iter()
                    .enumerate()
                    .map(|(i, (route, gw))| {
                        NatsServer::builder()
                            .name(&format!("{}{i}", name.to_lowercase()))
                            .jetstream()
                            .config(config)
                            .config(&format!(
                                "cluster {{ name: {name}, listen: \"127.0.0.1:{route}\", routes: [{routes}] }}"
                            ))
                            .config(&format!(
                                "gateway {{ name: {name}, listen: \"127.0.0.1:{gw}\", gateways: [{gateways}] }}"
                            ))
                            .config("leafnodes { listen: \"127.0.0.1:-1\" }")
                            .start()
                    })
                    .collect()
            })
            .collect()
    })
}
