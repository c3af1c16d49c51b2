//! Shared by the route and gateway tests: the servers' own view of their
//! links, the exporter's, and ways to make a link hold bytes.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use nats_test_server::sample::samples;
use nats_test_server::wait::{Text, Wait};
use nats_test_server::{http_get, NatsServer};
use serde_json::Value;

use crate::common;

/// The flags that poll the link sources.
pub const LINKS: &[&str] = &["--sources", "varz,routez,gatewayz"];

pub fn json(server: &NatsServer, path: &str) -> Value {
    serde_json::from_str(&http_get(&format!("{}/{path}", server.monitor_url()))).unwrap()
}

/// (labels after `server`, pending bytes) of every route the server lists.
pub fn routes_of(server: &NatsServer) -> BTreeSet<(String, String, i64)> {
    json(server, "routez")["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let name = r["remote_name"].as_str().unwrap_or_default();
            let remote = if name.is_empty() {
                r["remote_id"].as_str().unwrap()
            } else {
                name
            };
            (
                remote.to_string(),
                r["rid"].as_u64().unwrap().to_string(),
                r["pending_size"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// (gateway, direction, cid, pending bytes) of every gateway connection.
pub fn gateways_of(server: &NatsServer) -> BTreeSet<(String, String, String, i64)> {
    let reply = json(server, "gatewayz");
    let mut out = BTreeSet::new();
    for (direction, key) in [
        ("outbound", "outbound_gateways"),
        ("inbound", "inbound_gateways"),
    ] {
        for (name, v) in reply[key].as_object().unwrap() {
            let list = match v {
                Value::Array(list) => list.clone(),
                one => vec![one.clone()],
            };
            for g in list {
                let c = &g["connection"];
                out.insert((
                    name.clone(),
                    direction.to_string(),
                    c["cid"].as_u64().unwrap().to_string(),
                    c["pending_bytes"].as_i64().unwrap(),
                ));
            }
        }
    }
    out
}

pub fn exported_routes(text: &str, server: &str) -> BTreeSet<(String, String, i64)> {
    samples(
        text,
        "nats_delivery_route_pending_bytes",
        &[("server", server)],
    )
    .into_iter()
    .map(|(labels, v)| {
        let get = |k: &str| label(&labels, k);
        (get("remote"), get("rid"), v as i64)
    })
    .collect()
}

pub fn exported_gateways(text: &str, server: &str) -> BTreeSet<(String, String, String, i64)> {
    samples(
        text,
        "nats_delivery_gateway_pending_bytes",
        &[("server", server)],
    )
    .into_iter()
    .map(|(labels, v)| {
        let get = |k: &str| label(&labels, k);
        (get("gateway"), get("direction"), get("cid"), v as i64)
    })
    .collect()
}

pub fn label(labels: &str, key: &str) -> String {
    nats_test_server::sample::label(labels, key).unwrap_or_else(|| panic!("no {key} in {labels}"))
}

/// Scrapes until the server's own reply, read before and after the scrape,
/// is the same as at the previous round (links come up one by one, and
/// 2.10+ opens a pool of routes), when given, has `want` connections, and
/// `agrees` with the scrape; returns (the server's reply, the scrape).
pub async fn settled<T: PartialEq + std::fmt::Debug>(
    exporter: &nats_delivery_exporter::Exporter,
    want: Option<usize>,
    read: impl Fn() -> BTreeSet<T>,
    agrees: impl Fn(&BTreeSet<T>, &str) -> bool,
) -> (BTreeSet<T>, String) {
    let mut last = BTreeSet::new();
    Wait::secs(
        "links to settle and the exporter to agree with the server",
        20,
    )
    .every(Duration::from_millis(300))
    .until_async(async || {
        let before = read();
        let text = common::scrape(exporter).await;
        let steady = !before.is_empty() && before == last && read() == before;
        if steady && want.is_none_or(|w| before.len() == w) && agrees(&before, &text) {
            return Ok((before, text));
        }
        let seen = Text(format!("{before:?}\n{text}"));
        last = before;
        Err(seen)
    })
    .await
}

/// Whether the server's /routez fills `pending_size`: from 2.10.26 (before,
/// `Routez` in the server's monitor.go never set it).
pub fn fills_pending_size(server: &NatsServer) -> bool {
    let version = json(server, "varz")["version"]
        .as_str()
        .unwrap()
        .to_string();
    nats_test_server::version_numbers(&version) >= vec![2, 10, 26]
}

/// Stops (SIGSTOP) or resumes (SIGCONT) the server whose pid file is `pid_file`.
pub fn signal(pid_file: &std::path::Path, sig: &str) {
    let pid = std::fs::read_to_string(pid_file).unwrap();
    let ok = std::process::Command::new("kill")
        .args([sig, pid.trim()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Publishes 32 MiB on `burst`: more than loopback socket buffers hold,
/// less than the 48 MiB (75 % of max_pending) at which the server would
/// stall the publisher.
pub async fn burst(publisher: &async_nats::Client) {
    let payload = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
    for _ in 0..512 {
        publisher.publish("burst", payload.clone()).await.unwrap();
    }
    publisher.flush().await.unwrap();
}

/// [`settled`] once the links `read` gives hold bytes (`pending` of each),
/// within 30 s.
pub async fn holding<T: PartialEq + std::fmt::Debug>(
    exporter: &nats_delivery_exporter::Exporter,
    read: impl Fn() -> BTreeSet<T>,
    pending: fn(&T) -> i64,
) -> Result<(BTreeSet<T>, String), tokio::time::error::Elapsed> {
    let held = || {
        let links = read();
        let bytes: i64 = links.iter().map(pending).sum();
        if bytes > 0 {
            links
        } else {
            BTreeSet::new()
        }
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        settled(exporter, None, held, |_, _| true),
    )
    .await
}
