//! Both sides of application reports against a real server: the
//! nats-delivery-metrics crate publishes its totals, the exporter's
//! `ClientReports` re-exports them with exact values, counts garbage and
//! expires silent instances.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use nats_delivery_metrics::{
    Acknowledgement, ClientMetrics, PendingLimits, ReportOptions, SubscribeOptions,
};
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

// The link-in crate's test helpers: payloads, samples, promtool, waiting.
use crate::common;

use common::{assert_promtool_clean, exposition, publish_n, sync_with_server, PAYLOAD_LEN};

use crate::client_reports_support;
use client_reports_support::{exporter, on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_are_re_exported_exactly_and_expire() {
    let server = NatsServer::builder().start();
    let subject = "nats_delivery.reports";
    let (exporter_registry, reports) = exporter(&server, subject, Duration::from_secs(2)).await;

    // The application: 50 messages arrive while it is not reading, 10 fit.
    let mut app_registry = Registry::default();
    let metrics = ClientMetrics::new("billing", &mut app_registry);
    let app = metrics
        .connect_options(async_nats::ConnectOptions::new())
        .connect(server.client_url())
        .await
        .unwrap();
    let _orders = read_4_of_50(&server, &metrics, &app).await;
    let consumer = metrics.jetstream_consumer("ORDERS", "billing");
    consumer.record(Acknowledgement::Ack);
    consumer.record(Acknowledgement::Nak(None));
    consumer.record(Acknowledgement::Nak(None));

    let reporting = metrics.publish_reports(
        app.clone(),
        ReportOptions::new()
            .subject(subject)
            .instance("pod-1")
            .interval(Duration::from_millis(100)),
    );
    let labels = [
        ("client", "billing"),
        ("instance", "pod-1"),
        ("subscription", "orders"),
    ];
    Wait::secs("the report to arrive", 20)
        .every(Duration::from_millis(10))
        .until(|| {
            let text = exposition(&exporter_registry);
            exact(&text, "nats_delivery_app_delivered_messages_total", &labels) == Some(4.0)
        })
        .await;
    let text = exposition(&exporter_registry);
    assert_re_exported_exactly(&text);
    let id = [("client", "billing"), ("instance", "pod-1")];
    assert!(exact(
        &text,
        "nats_delivery_app_last_report_timestamp_seconds",
        &id
    )
    .is_some());
    assert_eq!(
        exact(&text, "nats_delivery_app_reports_malformed_total", &[]),
        Some(0.0)
    );
    // The same numbers as the application's own registry shows.
    let own = exposition(&app_registry);
    let own_labels = [("client", "billing"), ("subscription", "orders")];
    assert_eq!(
        exact(
            &own,
            "nats_delivery_client_dropped_messages_total",
            &own_labels
        ),
        Some(40.0)
    );
    nats_test_server::reference::assert_documented(&text);
    nats_test_server::reference::assert_documented(&own);
    assert_promtool_clean(&exporter_registry);
    assert_eq!(reports.instances(), 1);

    // The application stops reporting: after the expiry its series go.
    drop(reporting);
    let stopped = Instant::now();
    Wait::secs("the instance to expire", 20)
        .every(Duration::from_millis(10))
        .until(|| reports.instances() == 0)
        .await;
    assert!(stopped.elapsed() >= Duration::from_millis(1800));
    let text = exposition(&exporter_registry);
    assert_eq!(
        value_in(&text, "nats_delivery_app_dropped_messages_total"),
        None
    );
    assert_eq!(
        value_in(&text, "nats_delivery_app_last_report_timestamp_seconds"),
        None
    );
    assert!(exact(&text, "nats_delivery_app_reports_received_total", &[]).unwrap() >= 1.0);
}

/// Subscribes "orders" with room for 10 pending messages, lets 50 arrive
/// and reads 4: 40 dropped, 6 pending.
async fn read_4_of_50(
    server: &NatsServer,
    metrics: &ClientMetrics,
    app: &async_nats::Client,
) -> nats_delivery_metrics::Subscription {
    let options = SubscribeOptions::new()
        .name("orders")
        .pending_limits(PendingLimits::new(10, u64::MAX));
    let mut orders = metrics
        .subscribe_with(app, "orders.*", options)
        .await
        .unwrap();
    sync_with_server(app).await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    publish_n(&publisher, "orders.new", 50).await;
    Wait::secs("50 messages accounted", 20)
        .every(Duration::from_millis(10))
        .until(|| orders.dropped_messages() + orders.pending_messages() == 50)
        .await;
    for _ in 0..4 {
        orders.next().await.unwrap();
    }
    orders
}

/// The values of the report of pod-1: 4 delivered, 40 dropped, 6 pending
/// (10 at most), connected once, 1 ack and 2 NAKs.
fn assert_re_exported_exactly(text: &str) {
    let labels = [
        ("client", "billing"),
        ("instance", "pod-1"),
        ("subscription", "orders"),
    ];
    let value = |name| exact(text, name, &labels);
    assert_eq!(
        value("nats_delivery_app_dropped_messages_total"),
        Some(40.0)
    );
    assert_eq!(
        value("nats_delivery_app_dropped_bytes_total"),
        Some((40 * PAYLOAD_LEN) as f64)
    );
    assert_eq!(value("nats_delivery_app_pending_messages"), Some(6.0));
    assert_eq!(
        value("nats_delivery_app_pending_bytes"),
        Some((6 * PAYLOAD_LEN) as f64)
    );
    assert_eq!(
        value("nats_delivery_app_pending_messages_high_water"),
        Some(10.0)
    );
    assert_eq!(
        value("nats_delivery_app_slow_consumer_events_total"),
        Some(0.0)
    );
    let id = [("client", "billing"), ("instance", "pod-1")];
    let event = |e| {
        let l = [id[0], id[1], ("event", e)];
        exact(text, "nats_delivery_app_connection_events_total", &l)
    };
    assert_eq!(event("connected"), Some(1.0));
    assert_eq!(event("disconnected"), Some(0.0));
    let ack = |kind| {
        let l = [
            id[0],
            id[1],
            ("stream", "ORDERS"),
            ("consumer", "billing"),
            ("kind", kind),
        ];
        exact(
            text,
            "nats_delivery_app_jetstream_acknowledgements_total",
            &l,
        )
    };
    assert_eq!(ack("ack"), Some(1.0));
    assert_eq!(ack("nak"), Some(2.0));
    assert_eq!(ack("term"), Some(0.0));
}

/// Any sample of `name`, whatever its labels.
fn value_in(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_reports_are_counted_not_fatal() {
    let server = NatsServer::builder().start();
    let subject = "reports.test";
    let (registry, reports) = exporter(&server, subject, Duration::from_secs(60)).await;
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    let mut app_registry = Registry::default();
    let metrics = ClientMetrics::new("shop", &mut app_registry);
    let bodies: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        vec![0xff, 0x00, 0x13],
        br#"{"version":2,"client":"a","instance":"b"}"#.to_vec(),
        br#"{"version":1,"client":"","instance":"b"}"#.to_vec(),
        br#"{"version":1,"client":"a","instance":"b","subscriptions":[{"subscription":"x","dropped_messages":-3}]}"#.to_vec(),
        metrics.report("pod-7", 1),
    ];
    for body in &bodies {
        publisher
            .publish(on(subject, body), Bytes::from(body.clone()))
            .await
            .unwrap();
    }
    publisher.flush().await.unwrap();
    Wait::secs("all six reports", 20)
        .every(Duration::from_millis(10))
        .until(|| {
            let text = exposition(&registry);
            exact(&text, "nats_delivery_app_reports_received_total", &[]) == Some(6.0)
        })
        .await;
    let text = exposition(&registry);
    assert_eq!(
        exact(&text, "nats_delivery_app_reports_malformed_total", &[]),
        Some(5.0)
    );
    assert_eq!(reports.instances(), 1);
    let l = [
        ("client", "shop"),
        ("instance", "pod-7"),
        ("event", "connected"),
    ];
    assert_eq!(
        exact(&text, "nats_delivery_app_connection_events_total", &l),
        Some(0.0)
    );
    nats_test_server::reference::assert_documented(&text);
}
