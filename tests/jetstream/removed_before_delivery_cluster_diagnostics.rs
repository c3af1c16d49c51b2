//! What the cluster test shows when a step fails: each server's view of a
//! consumer and the position lines of a scrape.

use crate::common;
use nats_test_server::NatsServer;

/// What each server in `live` says of the stream LIMITED (its state,
/// `num_deleted` included, and cluster information) and of `consumer` (the
/// leader it names, the delivered position, the pending count), saying so
/// where a server lists neither.
pub(crate) fn replicas(live: &[&NatsServer], consumer: &str) -> String {
    let mut out = String::new();
    for server in live {
        let name = &server.name;
        let path = "jsz?accounts=true&streams=true&consumers=true";
        let limited: Vec<_> = stream_entries(server, path)
            .filter(|s| s["name"] == "LIMITED")
            .collect();
        if limited.is_empty() {
            out.push_str(&format!("  {name}: LIMITED not listed\n"));
        }
        for s in limited {
            let (state, cluster) = (&s["state"], &s["cluster"]);
            out.push_str(&format!(
                "  {name}: LIMITED state {state}, cluster {cluster}\n"
            ));
            let entries = s["consumer_detail"].as_array().cloned().unwrap_or_default();
            let ours: Vec<_> = entries.iter().filter(|c| c["name"] == consumer).collect();
            if ours.is_empty() {
                out.push_str(&format!("    {consumer} not listed\n"));
            }
            for c in ours {
                let (cluster, d, n) = (&c["cluster"], &c["delivered"], &c["num_pending"]);
                out.push_str(&format!(
                    "    {consumer}: cluster {cluster}, {d}, pending {n}\n"
                ));
            }
        }
    }
    out
}

/// `consumer`'s entries in `server`'s `/jsz` (one, or none).
fn consumer_entries(server: &NatsServer, consumer: &str) -> Vec<serde_json::Value> {
    let streams = stream_entries(server, "jsz?accounts=true&streams=true&consumers=true");
    let consumers =
        streams.flat_map(|s| s["consumer_detail"].as_array().cloned().unwrap_or_default());
    consumers.filter(|c| c["name"] == consumer).collect()
}

/// Every stream entry of every account in `server`'s reply to `path`.
pub(crate) fn stream_entries(
    server: &NatsServer,
    path: &str,
) -> impl Iterator<Item = serde_json::Value> {
    let jsz = common::monitor_json(&server.monitor_url(), path);
    let accounts = jsz["account_details"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    accounts
        .into_iter()
        .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default())
}

/// The stream's and `consumer`'s position lines of a scrape.
pub(crate) fn positions(text: &str, consumer: &str) -> String {
    let ours = format!("consumer=\"{consumer}\"");
    let lines = text.lines().filter(|l| {
        l.contains("stream=\"LIMITED\"")
            && (l.starts_with("nats_delivery_stream_") || l.contains(&ours))
    });
    lines.map(|l| format!("  {l}\n")).collect()
}

/// What each server in `live` says of the stream LIMITED (its state and
/// cluster information), and the lines of each one's log about it, about
/// catching up, about routes, and its warnings and errors.
pub(crate) fn stream_replicas(live: &[&NatsServer]) -> String {
    let mut out = String::new();
    for server in live {
        let streams = stream_entries(server, "jsz?accounts=true&streams=true");
        let name = &server.name;
        let limited: Vec<_> = streams.filter(|s| s["name"] == "LIMITED").collect();
        if limited.is_empty() {
            out.push_str(&format!("  {name}: LIMITED not listed\n"));
        }
        for s in limited {
            let (state, cluster) = (&s["state"], &s["cluster"]);
            out.push_str(&format!("  {name}: state {state}\n    cluster {cluster}\n"));
        }
        let log = server.log();
        let about = log.lines().filter(|l| {
            [
                "LIMITED",
                "atchup",
                "atching up",
                "snapshot",
                "[WRN]",
                "[ERR]",
                "oute",
            ]
            .iter()
            .any(|w| l.contains(w))
        });
        for line in about {
            out.push_str(&format!("    log: {line}\n"));
        }
    }
    out
}

/// `consumer`'s pending count as its leader among `live` reports it, read
/// `n` times a second apart: whether a figure off the truth stays so.
pub(crate) fn leader_pending_over(live: &[&NatsServer], consumer: &str, n: usize) -> String {
    let mut seen = Vec::new();
    for i in 0..n {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let mut reading = String::from("no leader");
        for server in live {
            for c in consumer_entries(server, consumer) {
                if c["cluster"]["leader"] == server.name.as_str() {
                    let (d, p) = (&c["delivered"]["stream_seq"], &c["num_pending"]);
                    reading = format!("{} at {d}: {p}", server.name);
                }
            }
        }
        seen.push(reading);
    }
    seen.join(", ")
}
