//! What the cluster test shows when a step fails: each server's view of a
//! consumer and the position lines of a scrape.

use crate::common;
use nats_test_server::NatsServer;

/// What each server in `live` says of `consumer`: its cluster information
/// (the leader it names), the delivered position, the pending count.
pub(crate) fn replicas(live: &[&NatsServer], consumer: &str) -> String {
    let mut out = String::new();
    for server in live {
        let path = "jsz?accounts=true&streams=true&consumers=true";
        let jsz = common::monitor_json(&server.monitor_url(), path);
        let accounts = jsz["account_details"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for a in &accounts {
            for s in a["stream_detail"].as_array().into_iter().flatten() {
                for c in s["consumer_detail"].as_array().into_iter().flatten() {
                    if c["name"] == consumer {
                        let (cluster, d, n) = (&c["cluster"], &c["delivered"], &c["num_pending"]);
                        let name = &server.name;
                        out.push_str(&format!("  {name}: cluster {cluster}, {d}, pending {n}\n"));
                    }
                }
            }
        }
    }
    out
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
