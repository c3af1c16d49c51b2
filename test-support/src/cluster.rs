//! JetStream clusters on loopback, started again when their meta group
//! does not form.

use std::time::{Duration, Instant};

use crate::wait::Wait;
use crate::{free_port, http_get, NatsServer};

/// Attempts at forming a cluster before the test gives up.
const ATTEMPTS: u32 = 3;

/// How long one attempt may take to form its meta group (it takes 0.3 to
/// 6 s on a loaded 2-core machine).
const ATTEMPT_WITHIN: Duration = Duration::from_secs(45);

/// How long a meta group whose elected leader counts fewer servers than were
/// started may stay so before the attempt is given up. nats-server 2.10 to
/// 2.12 (not 2.15) let the first leader of a new group, elected by a quorum
/// before every vote arrived, size the group to the peers it had heard from
/// ("Decreasing our clustersize: 3 -> 2" in its debug log); the server whose
/// vote came late was never added (seen for two minutes; 4 cold starts of 60
/// of a 3-node cluster on 2.10.26 under load, none of 60 on 2.15.1).
const SHORT_GROUP_WITHIN: Duration = Duration::from_secs(10);

/// A JetStream cluster of `n` servers (`n0`, `n1`, ...) routed to each
/// other on loopback, each with `config` added (accounts and the like),
/// returned once its meta group has formed (started again if it does not).
///
/// Every route port is chosen in advance ([`free_port`]) and every server
/// lists every route, so each server boots expecting a meta group of `n`.
pub fn cluster(n: usize, config: &str) -> Vec<NatsServer> {
    formed(&format!("a cluster of {n}"), || {
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
        vec![servers]
    })
    .remove(0)
}

/// Starts servers with `start` (grouped by cluster) until their one
/// JetStream meta group forms ([`meta_group_ready`]), at most [`ATTEMPTS`]
/// times. Starting servers is set-up, not the test: an attempt that does not
/// form within [`ATTEMPT_WITHIN`], or whose leader sizes the group short for
/// [`SHORT_GROUP_WITHIN`], is logged with every server's view of the
/// group and its JetStream cluster log lines, stopped, and started again.
pub(crate) fn formed(what: &str, start: impl Fn() -> Vec<Vec<NatsServer>>) -> Vec<Vec<NatsServer>> {
    for attempt in 1..=ATTEMPTS {
        let clusters = start();
        let servers: Vec<&NatsServer> = clusters.iter().flatten().collect();
        let began = Instant::now();
        let Err(reports) = wait_formed(&servers, ATTEMPT_WITHIN) else {
            return clusters;
        };
        let waited = began.elapsed().as_secs();
        let detail = explain(&servers, &reports);
        assert!(
            attempt < ATTEMPTS,
            "{what}: the JetStream meta group of {} servers did not form in \
             {ATTEMPTS} attempts; the last one, after {waited} s:\n{detail}",
            servers.len()
        );
        eprintln!(
            "test harness: {what}: the JetStream meta group of {} servers did not form \
             (attempt {attempt} of {ATTEMPTS}, {waited} s); starting it again. \
             What each server saw:\n{detail}",
            servers.len()
        );
    }
    unreachable!("the last attempt returns or panics")
}

/// Polls every server's `meta_cluster` until the whole group is ready: one
/// leader named by all, which sees every other server as a current, online
/// peer ([`meta_group_ready`]). The last reports on failure: `within` has
/// passed, or the leader sized the group short ([`group_short_of`]).
fn wait_formed(servers: &[&NatsServer], within: Duration) -> Result<(), Vec<serde_json::Value>> {
    let mut short_since: Option<Instant> = None;
    // Done when the group is ready (`Ok`) or has stayed short too long
    // (`Err`, which no more waiting mends); not yet otherwise.
    let formed = Wait::new("the JetStream meta group to form", within)
        .every(Duration::from_millis(250))
        .try_until_blocking(|| {
            let reports: Vec<serde_json::Value> = servers
                .iter()
                .map(|s| {
                    let jsz = http_get(&format!("{}/jsz", s.monitor_url()));
                    let v: serde_json::Value = serde_json::from_str(&jsz).unwrap_or_default();
                    v["meta_cluster"].clone()
                })
                .collect();
            if meta_group_ready(&reports, servers.len()) {
                return Ok(Ok(()));
            }
            let short = group_short_of(&reports, servers.len());
            short_since = short.then(|| short_since.unwrap_or_else(Instant::now));
            if short_since.is_some_and(|t| t.elapsed() >= SHORT_GROUP_WITHIN) {
                return Ok(Err(reports));
            }
            Err(reports)
        });
    formed.and_then(|ready| ready)
}

/// Each server's name, its `meta_cluster` report, and the lines of its log
/// about the JetStream cluster (peers, elections, leaders).
fn explain(servers: &[&NatsServer], reports: &[serde_json::Value]) -> String {
    let mut out = String::new();
    for (server, report) in servers.iter().zip(reports) {
        out.push_str(&format!("{}: {report}\n", server.name));
        let log = server.log();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| {
                [
                    "JetStream cluster",
                    "peer",
                    "leader",
                    "Leader",
                    "election",
                    "expected",
                ]
                .iter()
                .any(|w| l.contains(w))
            })
            .collect();
        for line in &lines[lines.len().saturating_sub(12)..] {
            out.push_str(&format!("    {line}\n"));
        }
    }
    out
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

/// A leader (the report that lists replicas) sizes its group below the `n`
/// servers started; the server left out may name no leader at all.
fn group_short_of(reports: &[serde_json::Value], n: usize) -> bool {
    reports
        .iter()
        .find(|r| r["replicas"].is_array() && r["leader"].as_str().is_some_and(|l| !l.is_empty()))
        .and_then(|r| r["cluster_size"].as_u64())
        .is_some_and(|size| size < n as u64)
}

#[cfg(test)]
mod tests {
    use super::{group_short_of, meta_group_ready};
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

    #[test]
    fn short_when_the_leader_counts_fewer_servers_than_started() {
        let follower = json!({"leader": "n0", "cluster_size": 2});
        let leader = |size: u64| json!({"leader": "n0", "cluster_size": size, "replicas": []});
        let left_out = json!({"cluster_size": 2});
        assert!(group_short_of(
            &[leader(2), follower.clone(), follower.clone()],
            3
        ));
        assert!(group_short_of(
            &[leader(2), follower.clone(), left_out.clone()],
            3
        ));
        assert!(!group_short_of(&[leader(3), follower.clone(), left_out], 3));
        let candidate = json!({"leader": "", "cluster_size": 2, "replicas": []});
        assert!(!group_short_of(&[candidate, follower.clone(), follower], 3));
    }
}
