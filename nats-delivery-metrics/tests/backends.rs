//! Every backend (prometheus-client, the `prometheus` crate, the `metrics`
//! facade with metrics-exporter-prometheus, OpenTelemetry) read through its
//! own exposition after one scenario against a real server that touches
//! every family: the same series with the same exact values, the help texts
//! of METRICS.md, and text that promtool accepts.
#![cfg(all(
    feature = "prometheus-client",
    feature = "prometheus",
    feature = "metrics",
    feature = "opentelemetry"
))]

mod backends_support;

use async_nats::jetstream::stream::Config;
use backends_support::{Attached, Backend, Exposed};
use bytes::Bytes;
use futures::StreamExt;
use nats_delivery_metrics::{ClientMetrics, PendingLimits, SubscribeOptions};
use nats_test_server::app::sync_with_server;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const SUB: [(&str, &str); 2] = [("client", "app"), ("subscription", "orders")];

/// The scenario: 25 messages of 7 bytes into a subscription limited to 10
/// pending messages (15 dropped), 4 of them read; a stream that stores 2
/// publishes and a subject without a stream (1 failure, no responders); a
/// request nobody answers; a consumer's pull batch checked (ratio 1/3).
async fn scenario(
    server: &NatsServer,
    metrics: &ClientMetrics,
) -> nats_delivery_metrics::Subscription {
    let client = metrics
        .connect(async_nats::ConnectOptions::new(), server.client_url())
        .await
        .unwrap();
    let limits = PendingLimits::new(10, PendingLimits::UNLIMITED);
    let options = SubscribeOptions::new()
        .name("orders")
        .pending_limits(limits);
    let mut sub = client.subscribe_with("orders.*", options).await.unwrap();
    sync_with_server(client.client()).await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    for i in 0..25 {
        let payload = Bytes::from(format!("order{i:02}"));
        publisher.publish("orders.new", payload).await.unwrap();
    }
    publisher.flush().await.unwrap();
    Wait::secs("15 drops", 20)
        .every(std::time::Duration::from_millis(10))
        .until(|| sub.dropped_messages() == 15)
        .await;
    for _ in 0..4 {
        sub.next().await.unwrap();
    }
    let jetstream = client.jetstream();
    let config = Config {
        name: "S".into(),
        subjects: vec!["s.*".into()],
        ..Default::default()
    };
    jetstream.context().create_stream(config).await.unwrap();
    for _ in 0..2 {
        let ack = jetstream.publish("s.a", "x".into()).await.unwrap();
        ack.await.unwrap();
    }
    let nothing = jetstream.publish("nostream", "x".into()).await.unwrap();
    assert!(nothing.await.is_err());
    assert!(client.request("nobody", Bytes::new()).await.is_err());
    metrics
        .jetstream_consumer("S", "worker")
        .check_pull_batch(100, 300);
    sub
}

/// What prometheus-client shows after the scenario, checked by hand.
fn assert_scenario_numbers(p: &Exposed) {
    let v = |name: &str, labels: &[(&str, &str)]| p.value(name, labels);
    assert_eq!(
        v("nats_delivery_client_dropped_messages_total", &SUB),
        Some(15.0)
    );
    assert_eq!(
        v("nats_delivery_client_dropped_bytes_total", &SUB),
        Some(105.0)
    );
    assert_eq!(
        v("nats_delivery_client_delivered_messages_total", &SUB),
        Some(4.0)
    );
    assert_eq!(v("nats_delivery_client_pending_messages", &SUB), Some(6.0));
    assert_eq!(v("nats_delivery_client_pending_bytes", &SUB), Some(42.0));
    assert_eq!(
        v("nats_delivery_client_pending_messages_high_water", &SUB),
        Some(10.0)
    );
    assert_eq!(
        v("nats_delivery_client_pending_messages_limit", &SUB),
        Some(10.0)
    );
    assert_eq!(v("nats_delivery_client_pending_bytes_limit", &SUB), None);
    let client = [("client", "app")];
    assert_eq!(
        v(
            "nats_delivery_client_jetstream_published_messages_total",
            &client
        ),
        Some(2.0)
    );
    let no_responders = [("client", "app"), ("reason", "no_responders")];
    assert_eq!(
        v(
            "nats_delivery_client_jetstream_publish_failures_total",
            &no_responders
        ),
        Some(1.0)
    );
    // The scenario's request (the sync request went through the plain client).
    assert_eq!(
        v("nats_delivery_client_request_no_responders_total", &client),
        Some(1.0)
    );
    let consumer = [("client", "app"), ("stream", "S"), ("consumer", "worker")];
    assert_eq!(
        v("nats_delivery_client_jetstream_pull_batch_ratio", &consumer),
        Some(1.0 / 3.0)
    );
    let connected = [("client", "app"), ("event", "connected")];
    assert_eq!(
        v("nats_delivery_client_connection_events_total", &connected),
        Some(1.0)
    );
}

/// Every help text is METRICS.md's; the text backends pass promtool and
/// list only documented names, types and labels.
fn assert_documented(backend: Backend, exposed: &Exposed) {
    let docs = nats_test_server::reference::documented();
    for (name, help) in &exposed.help {
        let doc = docs
            .get(name)
            .unwrap_or_else(|| panic!("{backend:?}: {name} not in METRICS.md"));
        assert_eq!(help, &doc.help, "{backend:?}: help of {name}");
    }
    if let Some(text) = &exposed.text {
        nats_test_server::reference::assert_documented(text);
        if backend != Backend::PrometheusClient {
            nats_test_server::promtool::assert_metrics_clean(text);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend_exposes_the_same_exact_numbers() {
    let server = NatsServer::builder().jetstream().start();
    let metrics = ClientMetrics::named("app");
    let attached: Vec<(Backend, Attached)> = Backend::ALL
        .iter()
        .map(|b| (*b, b.attach(&metrics)))
        .collect();
    let sub = scenario(&server, &metrics).await;

    let reads: Vec<(Backend, Exposed)> = attached.iter().map(|(b, a)| (*b, a.read())).collect();
    let reference = &reads[0].1;
    assert_scenario_numbers(reference);
    assert_eq!(
        reference.help.len(),
        20 - 1,
        "every family but the bytes limit"
    );
    for (backend, exposed) in &reads {
        assert_eq!(
            exposed.values, reference.values,
            "{backend:?} against prometheus-client"
        );
        assert_documented(*backend, exposed);
    }

    // The subscription ends: prometheus-client, prometheus and OpenTelemetry
    // drop its gauges; the `metrics` facade cannot remove a series and sets
    // them to 0. The counters stay in every backend.
    drop(sub);
    let reads: Vec<(Backend, Exposed)> = attached.iter().map(|(b, a)| (*b, a.read())).collect();
    let pending = "nats_delivery_client_pending_messages";
    for (backend, exposed) in &reads {
        let expected = (*backend == Backend::Metrics).then_some(0.0);
        assert_eq!(exposed.value(pending, &SUB), expected, "{backend:?}");
        let dropped = exposed.value("nats_delivery_client_dropped_messages_total", &SUB);
        assert_eq!(dropped, Some(15.0), "{backend:?}");
    }
}

/// Two connections' metrics in one `prometheus` registry: the `client`
/// constant label keeps their descriptors apart; the same name twice is
/// refused, as the `prometheus` crate refuses any duplicate.
#[test]
fn prometheus_registry_takes_two_clients_and_refuses_a_duplicate() {
    let registry = prometheus::Registry::new();
    ClientMetrics::named("a")
        .register_prometheus(&registry)
        .unwrap();
    ClientMetrics::named("b")
        .register_prometheus(&registry)
        .unwrap();
    let duplicate = ClientMetrics::named("a").register_prometheus(&registry);
    assert!(duplicate.is_err(), "{duplicate:?}");
    let mut text = String::new();
    prometheus::TextEncoder::new()
        .encode_utf8(&registry.gather(), &mut text)
        .unwrap();
    for client in ["a", "b"] {
        let line = format!(
            "nats_delivery_client_connection_events_total{{client=\"{client}\",event=\"closed\"}} 0\n"
        );
        assert!(text.contains(&line), "{line} missing from\n{text}");
    }
}

/// Two connections' metrics on one OpenTelemetry meter (a queue group over
/// two connections): the instruments are shared, each callback observes its
/// own `client`, and no series is observed twice.
#[test]
fn opentelemetry_meter_takes_two_clients() {
    use opentelemetry::metrics::MeterProvider;
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let meter = provider.meter("nats-delivery-metrics");
    ClientMetrics::named("a").register_opentelemetry(&meter);
    ClientMetrics::named("b").register_opentelemetry(&meter);
    provider.force_flush().unwrap();
    let exported = exporter.get_finished_metrics().unwrap();
    let exposed = backends_support::from_opentelemetry(exported.last().unwrap());
    let events = "nats_delivery_client_connection_events_total";
    for client in ["a", "b"] {
        let closed = [("client", client), ("event", "closed")];
        assert_eq!(exposed.value(events, &closed), Some(0.0), "{exposed:?}");
    }
    // 7 events for each client, nothing else before a subscription.
    assert_eq!(exposed.values.len(), 14, "{:?}", exposed.values.keys());
    // Named as the NATS .NET client's meter names them, with its system.
    let collection = exported.last().unwrap();
    let metrics: Vec<_> = collection
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .collect();
    let names: Vec<&str> = metrics.iter().map(|m| m.name()).collect();
    assert!(
        names.contains(&"nats.client.connection.events"),
        "{names:?}"
    );
    let otel = backends_support::otel_names();
    assert!(names.iter().all(|n| otel.contains_key(*n)), "{names:?}");
    let dropped = &otel["nats.client.messages.dropped"];
    assert_eq!(
        dropped.family,
        "nats_delivery_client_dropped_messages_total"
    );
    assert_eq!(dropped.unit, "{message}");
    let system = ("messaging.system".to_string(), "nats".to_string());
    assert!(otel.values().all(|row| row.added.contains(&system)));
    assert_eq!(otel.len(), 20, "one row per family");
}
