//! JetStream clusters on loopback, and waiting until one can place
//! replicated streams.

use std::time::{Duration, Instant};

use crate::{free_port, http_get, NatsServer};

/// How long a new cluster may take to be ready for replicated streams. On a
/// loaded machine a server's first statistics can be lost while its routes
/// come up, and the next ones follow only after tens of seconds; until they
/// arrive the meta leader refuses replicated streams ("no suitable peers for
/// placement"), which was seen for more than 30 s.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// A JetStream cluster of `n` servers (`n0`, `n1`, ...) routed to each
/// other on loopback, each with `config` added (accounts and the like),
/// returned once it can place streams on all `n` servers
/// ([`wait_jetstream_ready`]).
pub fn cluster(n: usize, config: &str) -> Vec<NatsServer> {
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let routes = ports
        .iter()
        .map(|p| format!("nats-route://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(", ");
    let servers: Vec<NatsServer> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            NatsServer::builder()
                .name(&format!("n{i}"))
                .jetstream()
                .config(config)
                .config(&format!(
                    "cluster {{ name: C, listen: \"127.0.0.1:{port}\", routes: [{routes}] }}"
                ))
                .start()
        })
        .collect();
    wait_jetstream_ready(&servers.iter().collect::<Vec<_>>());
    servers
}

/// Waits until `servers`, the whole JetStream meta group, agree on a meta
/// leader and that leader sees every other server as a current, online
/// peer, as each server's `/jsz` `meta_cluster` reports it. Panics with the
/// last reports after two minutes.
pub fn wait_jetstream_ready(servers: &[&NatsServer]) {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        let reports: Vec<serde_json::Value> = servers
            .iter()
            .map(|s| {
                let jsz = http_get(&format!("{}/jsz", s.monitor_url()));
                let v: serde_json::Value = serde_json::from_str(&jsz).unwrap_or_default();
                v["meta_cluster"].clone()
            })
            .collect();
        if meta_group_ready(&reports, servers.len()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the JetStream meta group of {} servers was not ready in {READY_WITHIN:?}: {reports:?}",
            servers.len()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// One leader named by every report, and one report (the leader's) listing
/// all `n - 1` others as current and not offline.
fn meta_group_ready(reports: &[serde_json::Value], n: usize) -> bool {
    let leader = reports.first().and_then(|r| r["leader"].as_str());
    let agreed = leader
        .is_some_and(|l| !l.is_empty() && reports.iter().all(|r| r["leader"].as_str() == Some(l)));
    let all_current = |r: &serde_json::Value| {
        r["replicas"].as_array().is_some_and(|peers| {
            peers.len() == n - 1
                && peers
                    .iter()
                    .all(|p| p["current"] == true && p["offline"] != true)
        })
    };
    agreed && (n == 1 || reports.iter().any(all_current))
}

#[cfg(test)]
mod tests {
    use super::meta_group_ready;
    use serde_json::json;

    #[test]
    fn ready_only_with_one_leader_and_every_peer_current() {
        let peer = |name: &str, current: bool| json!({"name": name, "current": current});
        let follower = json!({"leader": "n0"});
        let ready = |leader| meta_group_ready(&[leader, follower.clone(), follower.clone()], 3);
        assert!(ready(
            json!({"leader": "n0", "replicas": [peer("n1", true), peer("n2", true)]})
        ));
        assert!(!ready(
            json!({"leader": "n0", "replicas": [peer("n1", true), peer("n2", false)]})
        ));
        assert!(!ready(
            json!({"leader": "n0", "replicas": [peer("n1", true),
            {"name": "n2", "current": true, "offline": true}]})
        ));
        assert!(!ready(
            json!({"leader": "n0", "replicas": [peer("n1", true)]})
        ));
        let leader = json!({"leader": "n0", "replicas": [peer("n1", true), peer("n2", true)]});
        let elsewhere = json!({"leader": "n1"});
        assert!(!meta_group_ready(&[leader, follower.clone(), elsewhere], 3));
        let none = json!({"leader": ""});
        assert!(!meta_group_ready(&[none.clone(), none.clone(), none], 3));
    }
}
