//! The storm of `storm.rs` read through each backend's own exposition (a
//! module of `storm.rs`: its storm and readings).

use super::backends_support::Backend;
use super::*;

fn reader(backend: Backend, metrics: &ClientMetrics) -> Box<dyn Fn() -> Counted> {
    let attached = backend.attach(metrics);
    Box::new(move || {
        let exposed = attached.read();
        let labels = [("client", "storm"), ("subscription", "storm")];
        let value = |name: &str| exposed.value(name, &labels).unwrap_or(0.0) as u64;
        Counted {
            delivered: value("nats_delivery_client_delivered_messages_total"),
            dropped: value("nats_delivery_client_dropped_messages_total"),
            pending: value("nats_delivery_client_pending_messages"),
            dropped_bytes: value("nats_delivery_client_dropped_bytes_total"),
        }
    })
}

#[test]
fn a_storm_through_prometheus_client_is_exact() {
    storm_read(
        2,
        16,
        300_000,
        Publisher::SameProcess,
        Some(|m| reader(Backend::PrometheusClient, m)),
    );
}

#[test]
fn a_storm_through_the_prometheus_crate_is_exact() {
    storm_read(
        2,
        16,
        300_000,
        Publisher::SameProcess,
        Some(|m| reader(Backend::Prometheus, m)),
    );
}

#[test]
fn a_storm_through_the_metrics_facade_is_exact() {
    storm_read(
        2,
        16,
        300_000,
        Publisher::SameProcess,
        Some(|m| reader(Backend::Metrics, m)),
    );
}

#[test]
fn a_storm_through_opentelemetry_is_exact() {
    storm_read(
        2,
        16,
        300_000,
        Publisher::SameProcess,
        Some(|m| reader(Backend::OpenTelemetry, m)),
    );
}
