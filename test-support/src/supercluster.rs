//! Super-clusters: clusters of JetStream servers joined to each other by
//! gateways, for tests of what reaches every server of a deployment (the
//! system account's requests, gateway connections).

use crate::{free_port, NatsServer};

/// Starts one cluster per `(name, size)`, its servers routed to each other
/// and every cluster joined to every other by gateways, all on loopback.
///
/// Servers are named by their cluster's name in lower case and their index
/// (`a0`, `a1`, `b0`, ...), so names are unique across the super-cluster as
/// long as cluster names are. Every server has JetStream, `config` added
/// (accounts and the like: the system account must be the same everywhere)
/// and listens for leaf node connections on a port of its own choosing
/// (see [`NatsServer::leafnode_port`]). Route and gateway ports are taken
/// in advance ([`free_port`]): each server must know the others' before
/// they start. Returns the servers cluster by cluster, in the order given.
pub fn supercluster(clusters: &[(&str, usize)], config: &str) -> Vec<Vec<NatsServer>> {
    let plans: Vec<ClusterPlan> = clusters
        .iter()
        .map(|(name, size)| ClusterPlan {
            name: name.to_string(),
            routes: (0..*size).map(|_| free_port()).collect(),
            gateways: (0..*size).map(|_| free_port()).collect(),
        })
        .collect();
    plans
        .iter()
        .map(|plan| {
            let remotes = plans
                .iter()
                .filter(|other| other.name != plan.name)
                .map(|other| format!("{{ name: {}, urls: [{}] }}", other.name, other.gateway_urls()))
                .collect::<Vec<_>>()
                .join(", ");
            (0..plan.routes.len())
                .map(|i| {
                    NatsServer::builder()
                        .name(&format!("{}{i}", plan.name.to_lowercase()))
                        .jetstream()
                        .config(config)
                        .config(&plan.cluster_block(i))
                        .config(&format!(
                            "gateway {{ name: {}, listen: \"127.0.0.1:{}\", gateways: [{remotes}] }}",
                            plan.name, plan.gateways[i]
                        ))
                        .config("leafnodes { listen: \"127.0.0.1:-1\" }")
                        .start()
                })
                .collect()
        })
        .collect()
}

/// The ports one cluster's servers are given before any starts.
struct ClusterPlan {
    name: String,
    routes: Vec<u16>,
    gateways: Vec<u16>,
}

impl ClusterPlan {
    fn cluster_block(&self, i: usize) -> String {
        let routes = self
            .routes
            .iter()
            .map(|p| format!("nats-route://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "cluster {{ name: {}, listen: \"127.0.0.1:{}\", routes: [{routes}] }}",
            self.name, self.routes[i]
        )
    }

    fn gateway_urls(&self) -> String {
        self.gateways
            .iter()
            .map(|p| format!("\"nats://127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
