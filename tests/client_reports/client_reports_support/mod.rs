//! The exporter side of report tests: a registry holding a `ClientReports`
//! fed from a subject of a real server. The including test has the link-in
//! crate's test helpers as `mod common`.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use nats_delivery_exporter::{run_client_reports, ClientReports, ReportLimits};
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;
use serde_json::json;

use super::common::sync_with_server;

/// Exporter side: a registry holding a `ClientReports` fed from `subject`.
pub async fn exporter(
    server: &NatsServer,
    subject: &str,
    expiry: Duration,
) -> (Registry, Arc<ClientReports>) {
    exporter_with(server, subject, expiry, ReportLimits::default()).await
}

/// [`exporter`] with limits of the test's choice.
pub async fn exporter_with(
    server: &NatsServer,
    subject: &str,
    expiry: Duration,
    limits: ReportLimits,
) -> (Registry, Arc<ClientReports>) {
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let reports = Arc::new(ClientReports::with_limits(expiry, limits));
    let mut registry = Registry::default();
    registry.register_collector(Box::new(reports.clone()));
    tokio::spawn(run_client_reports(
        client.clone(),
        subject.to_string(),
        reports.clone(),
    ));
    // Let both subscriptions (`<subject>.*` and the bare subject) reach the
    // server before anyone publishes.
    Wait::secs("the exporter's subscription", 10)
        .every(Duration::ZERO)
        .until_async(async || {
            sync_with_server(&client).await;
            let subsz = nats_test_server::http_get(&format!("{}/subsz", server.monitor_url()));
            let subsz: serde_json::Value = serde_json::from_str(&subsz).unwrap();
            let subscriptions = subsz["num_subscriptions"].as_u64().unwrap_or(0);
            (subscriptions >= 2).then_some(()).ok_or(subscriptions)
        })
        .await;
    (registry, reports)
}

/// The default report subject.
pub const SUBJECT: &str = "nats_delivery.reports";

pub fn report(
    client: &str,
    instance: &str,
    sequence: u64,
    subscriptions: serde_json::Value,
) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({
            "version": 1, "client": client, "instance": instance, "sequence": sequence,
            "timestamp_ms": 0, "subscriptions": subscriptions,
            "connection_events": {}, "jetstream_consumers": [],
        }))
        .unwrap(),
    )
}

/// The subject an honest reporter sends `body` on: `<prefix>.<client>`
/// (`<prefix>.unnamed` for a body without a client name).
pub fn on(prefix: &str, body: &[u8]) -> String {
    let client = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("client").and_then(|c| c.as_str()).map(str::to_string))
        .filter(|c| !c.is_empty() && c.len() <= 128 && !c.contains(['.', '*', '>', ' ']))
        .unwrap_or_else(|| "unnamed".to_string());
    format!("{prefix}.{client}")
}

pub async fn send(server: &NatsServer, bodies: impl IntoIterator<Item = Bytes>) {
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    for body in bodies {
        publisher.publish(on(SUBJECT, &body), body).await.unwrap();
    }
    publisher.flush().await.unwrap();
}

pub fn received(text: &str) -> Option<f64> {
    exact(text, "nats_delivery_app_reports_received_total", &[])
}

pub fn rejected(text: &str, reason: &str) -> Option<f64> {
    exact(
        text,
        "nats_delivery_app_reports_rejected_total",
        &[("reason", reason)],
    )
}

pub fn folded(text: &str, what: &str) -> Option<f64> {
    exact(
        text,
        "nats_delivery_app_report_entries_folded_total",
        &[("what", what)],
    )
}

pub fn dropped(text: &str, client: &str, instance: &str, subscription: &str) -> Option<f64> {
    let l = [
        ("client", client),
        ("instance", instance),
        ("subscription", subscription),
    ];
    exact(text, "nats_delivery_app_dropped_messages_total", &l)
}

pub fn count_samples(text: &str, name: &str) -> usize {
    nats_test_server::sample::samples(text, name, &[]).len()
}
