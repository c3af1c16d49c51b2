//! `/healthz` as a source: a standalone JetStream server is healthy; a
//! server of a three-server JetStream cluster whose peers never come has no
//! meta leader, answers 503 with one JETSTREAM problem (a problem without
//! a kind before 2.10), and the exporter
//! says so instead of counting a failed poll.
use crate::common;

use nats_test_server::sample::value;
use nats_test_server::{free_port, NatsServer};

const KINDS: [&str; 7] = [
    "connection",
    "bad_request",
    "jetstream",
    "account",
    "stream",
    "consumer",
    "unspecified",
];

/// The server's own list of problems, by kind (label value), and its HTTP status.
async fn server_problems(server: &NatsServer) -> (u16, Vec<(String, u64)>) {
    let url = format!("{}/healthz?details=true", server.monitor_url());
    let response = reqwest::get(&url).await.expect("GET /healthz");
    let status = response.status().as_u16();
    let reply: serde_json::Value = response.json().await.expect("healthz JSON");
    let errors = reply["errors"].as_array().cloned().unwrap_or_default();
    let counts = KINDS
        .iter()
        .map(|kind| {
            let n = if *kind == "unspecified" {
                // Before 2.10: one error, without a kind.
                usize::from(errors.is_empty() && reply["error"].as_str().is_some())
            } else {
                errors
                    .iter()
                    .filter(|e| e["type"].as_str().unwrap_or("").eq_ignore_ascii_case(kind))
                    .count()
            };
            (kind.to_string(), n as u64)
        })
        .collect();
    (status, counts)
}

fn exported_problems(text: &str, server: &str) -> Vec<(String, u64)> {
    KINDS
        .iter()
        .map(|kind| {
            let labels = [("server", server), ("kind", *kind)];
            let n = value(text, "nats_delivery_server_health_problems", &labels)
                .unwrap_or_else(|| panic!("no {kind} problems series in\n{text}"));
            (kind.to_string(), n as u64)
        })
        .collect()
}

#[tokio::test]
async fn a_standalone_jetstream_server_is_healthy() {
    let server = NatsServer::builder().name("alone").jetstream().start();
    let exporter = common::exporter(&[server.monitor_url()], &["--sources", "varz,healthz"]);
    let text = common::scrape(&exporter).await;
    nats_test_server::reference::assert_documented(&text);
    let up = [("server", "alone"), ("source", "healthz")];
    assert_eq!(value(&text, "nats_delivery_up", &up), Some(1.0), "{text}");
    let healthy = value(
        &text,
        "nats_delivery_server_healthy",
        &[("server", "alone")],
    );
    assert_eq!(healthy, Some(1.0), "{text}");
    assert_eq!(
        server_problems(&server).await,
        (200, exported_problems(&text, "alone"))
    );
    assert!(exported_problems(&text, "alone")
        .iter()
        .all(|(_, n)| *n == 0));
}

#[tokio::test]
async fn a_cluster_member_without_a_meta_leader_is_unhealthy_with_one_jetstream_problem() {
    // Routes to two ports nobody listens on: the meta group of three never
    // forms, so JetStream has no leader.
    let routes = [free_port(), free_port()]
        .iter()
        .map(|p| format!("nats-route://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(", ");
    let port = free_port();
    let server = NatsServer::builder()
        .name("lonely")
        .jetstream()
        .config(&format!(
            "cluster {{ name: C, listen: \"127.0.0.1:{port}\", routes: [{routes}] }}"
        ))
        .start();
    let exporter = common::exporter(&[server.monitor_url()], &["--sources", "varz,healthz"]);
    let text = common::scrape(&exporter).await;
    nats_test_server::reference::assert_documented(&text);
    let up = [("server", "lonely"), ("source", "healthz")];
    assert_eq!(value(&text, "nats_delivery_up", &up), Some(1.0), "{text}");
    let errors = [("server", "lonely"), ("source", "healthz")];
    assert!(
        nats_test_server::sample::samples(&text, "nats_delivery_scrape_errors_total", &errors)
            .is_empty(),
        "a 503 health answer is not a failed poll:\n{text}"
    );
    let healthy = value(
        &text,
        "nats_delivery_server_healthy",
        &[("server", "lonely")],
    );
    assert_eq!(healthy, Some(0.0), "{text}");
    let exported = exported_problems(&text, "lonely");
    assert_eq!(server_problems(&server).await, (503, exported.clone()));
    // Servers before 2.10 list no kinds.
    let kind = if nats_test_server::version_numbers(&nats_test_server::version_under_test())
        < vec![2, 10]
    {
        "unspecified"
    } else {
        "jetstream"
    };
    let problems: Vec<_> = exported.iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(problems, [&(kind.to_string(), 1)], "{text}");
}
