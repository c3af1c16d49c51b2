//! Super-clusters: clusters of JetStream servers joined to each other by
//! gateways, for tests of what reaches every server of a deployment (the
//! system account's requests, gateway connections).

use crate::{free_port, port_after, NatsServer};

/// Starts one cluster per `(name, size)`, its servers routed to each other
/// and every cluster joined to every other by gateways, all on loopback.
///
/// Servers are named by their cluster's name in lower case and their index
/// (`a0`, `a1`, `b0`, ...), so names are unique across the super-cluster as
/// long as cluster names are. Every server has JetStream, `config` added
/// (accounts and the like: the system account must be the same everywhere)
/// and listens for leaf node connections (see [`NatsServer::leafnode_port`]).
///
/// One port per cluster is chosen in advance ([`free_port`]), its first
/// server's route port, the seed route of the others; every other port is
/// chosen by its server and read back, so another process has few chances
/// to take one in between. The first cluster's gateways are the other
/// clusters' seed gateways; the servers learn the rest from each other
/// (route and gateway gossip). Returns the servers cluster by cluster, in
/// the order given, once their one JetStream meta group is ready
/// ([`crate::wait_jetstream_ready`]).
pub fn supercluster(clusters: &[(&str, usize)], config: &str) -> Vec<Vec<NatsServer>> {
    let mut seed_gateway: Option<String> = None;
    let mut out: Vec<Vec<NatsServer>> = Vec::new();
    for (name, size) in clusters {
        // A clustered JetStream server will not start without a route
        // configured: the seed's is to itself (a server skips a route to
        // itself), on the one port chosen in advance.
        let seed_route = free_port();
        let routes = format!("routes: [\"nats-route://127.0.0.1:{seed_route}\"]");
        let mut servers: Vec<NatsServer> = Vec::new();
        for i in 0..*size {
            let listen = if i == 0 {
                seed_route.to_string()
            } else {
                "-1".into()
            };
            let gateways = seed_gateway.as_deref().unwrap_or_default();
            servers.push(
                NatsServer::builder()
                    .name(&format!("{}{i}", name.to_lowercase()))
                    .jetstream()
                    .config(config)
                    .config(&format!(
                        "cluster {{ name: {name}, listen: \"127.0.0.1:{listen}\", {routes} }}"
                    ))
                    .config(&format!(
                        "gateway {{ name: {name}, listen: \"127.0.0.1:-1\"{gateways} }}"
                    ))
                    .config("leafnodes { listen: \"127.0.0.1:-1\" }")
                    .start(),
            );
        }
        if seed_gateway.is_none() {
            let urls = servers
                .iter()
                .map(|s| format!("\"nats://127.0.0.1:{}\"", gateway_port(s)))
                .collect::<Vec<_>>()
                .join(", ");
            seed_gateway = Some(format!(", gateways: [{{ name: {name}, urls: [{urls}] }}]"));
        }
        out.push(servers);
    }
    crate::wait_jetstream_ready(&out.iter().flatten().collect::<Vec<_>>());
    out
}

/// The port `server` listens on for gateway connections, from its log.
fn gateway_port(server: &NatsServer) -> u16 {
    port_after(&server.log(), "Listening for gateways connections on ")
        .unwrap_or_else(|| panic!("{}: no gateway port in its log", server.name))
}
