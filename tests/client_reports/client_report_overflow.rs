//! Instances past the instance limit, against a real server: their reports
//! are summed under client and instance `__overflow__`, each folded instance
//! adding exactly what it counted since its previous report (its whole new
//! total after a restart), and past the folded-instance limit reports are
//! rejected.

use std::time::Duration;

use bytes::Bytes;
use nats_delivery_exporter::ReportLimits;
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::json;

use crate::client_reports_support;
use crate::common;

use client_reports_support::*;
use common::{assert_promtool_clean, exposition};

const LONG: Duration = Duration::from_secs(600);

const OVERFLOW: [(&str, &str); 2] = [("client", "__overflow__"), ("instance", "__overflow__")];

/// A report with one subscription, two consumers and one connection event.
struct Body {
    sequence: u64,
    dropped: u64,
    pending: u64,
    high_water: u64,
    /// received_messages of the two consumers.
    received: [u64; 2],
    connected: u64,
}

fn body(instance: &str, b: Body) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({
            "version": 1, "client": "app", "instance": instance, "sequence": b.sequence,
            "timestamp_ms": 0,
            "subscriptions": [{"subscription": format!("orders-{instance}"),
                "dropped_messages": b.dropped, "pending_messages": b.pending,
                "pending_messages_high_water": b.high_water}],
            "connection_events": {"connected": b.connected},
            "jetstream_consumers": [
                {"stream": "S", "consumer": "c1", "received_messages": b.received[0]},
                {"stream": "S", "consumer": "c2", "received_messages": b.received[1]},
            ],
        }))
        .unwrap(),
    )
}

fn overflow(text: &str, name: &str, extra: &[(&str, &str)]) -> Option<f64> {
    let mut labels = OVERFLOW.to_vec();
    labels.extend_from_slice(extra);
    exact(text, name, &labels)
}

fn folded_reports(text: &str) -> Option<f64> {
    exact(text, "nats_delivery_app_reports_folded_total", &[])
}

/// Reports of pod-0 to pod-5: dropped 10, 20, ... 60, pending 1 to 6,
/// high water 10 to 15, 101 received.
fn first_reports() -> impl Iterator<Item = Bytes> {
    (0..6u64).map(|i| {
        let b = Body {
            sequence: 5,
            dropped: 10 * (i + 1),
            pending: i + 1,
            high_water: 10 + i,
            received: [100, 1],
            connected: 1,
        };
        body(&format!("pod-{i}"), b)
    })
}

/// The second round: two folded instances count more, two restarted, and a
/// kept one.
fn second_reports() -> [Bytes; 5] {
    [
        // +5, +50 and +0 received, +0 connected.
        ("pod-2", 6, 35, 1, [150, 1], 1),
        // +7, +50 and +1 received, +1 connected.
        ("pod-3", 6, 47, 1, [150, 2], 2),
        // Sequence back to 1: a restart, whole totals added: 4, 2, 1.
        ("pod-4", 1, 4, 1, [2, 0], 1),
        // Sequence forward but dropped went back (60 to 3): a restart
        // too, whole totals added: 3, 151, 1.
        ("pod-5", 6, 3, 1, [150, 1], 1),
        // A kept instance is not summed.
        ("pod-0", 6, 1_000, 1, [1_000, 1], 1),
    ]
    .map(
        |(instance, sequence, dropped, pending, received, connected)| {
            let b = Body {
                sequence,
                dropped,
                pending,
                high_water: 20,
                received,
                connected,
            };
            body(instance, b)
        },
    )
}

/// The `__overflow__` series after the second round: the first totals plus
/// every increase (the whole totals of a restart), the gauges the sum of the
/// latest values.
fn assert_overflow_after_second_round(text: &str) {
    let sub = [("subscription", "__overflow__")];
    assert_eq!(
        overflow(text, "nats_delivery_app_dropped_messages_total", &sub),
        Some(180.0 + 5.0 + 7.0 + 4.0 + 3.0)
    );
    let consumer = [("stream", "__overflow__"), ("consumer", "__overflow__")];
    assert_eq!(
        overflow(
            text,
            "nats_delivery_app_jetstream_received_messages_total",
            &consumer
        ),
        Some(4.0 * 101.0 + 50.0 + 51.0 + 2.0 + 151.0)
    );
    assert_eq!(
        overflow(
            text,
            "nats_delivery_app_connection_events_total",
            &[("event", "connected")]
        ),
        Some(4.0 + 1.0 + 1.0 + 1.0)
    );
    assert_eq!(
        overflow(text, "nats_delivery_app_instance_restarts_total", &[]),
        Some(2.0)
    );
    // Latest pending of each folded instance, summed; the largest high water.
    assert_eq!(
        overflow(text, "nats_delivery_app_pending_messages", &sub),
        Some(4.0)
    );
    assert_eq!(
        overflow(text, "nats_delivery_app_pending_messages_high_water", &sub),
        Some(20.0)
    );
}

/// Two kept instances, four folded. Second round: two folded instances
/// count more, one restarted (its sequence went back), one restarted seen
/// only in its totals. The `__overflow__` counters equal the first totals
/// plus every increase, the gauges the sum of the latest values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_past_the_instance_limit_are_summed_exactly() {
    let server = NatsServer::builder().start();
    let limits = ReportLimits {
        max_instances: 2,
        ..ReportLimits::default()
    };
    let (registry, reports) = exporter_with(&server, SUBJECT, LONG, limits).await;
    send(&server, first_reports()).await;
    Wait::secs("6 reports", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(6.0))
        .await;
    let text = exposition(&registry);
    assert_eq!((reports.instances(), reports.folded_instances()), (2, 4));
    assert_eq!(dropped(&text, "app", "pod-1", "orders-pod-1"), Some(20.0));
    assert_eq!(dropped(&text, "app", "pod-2", "orders-pod-2"), None);
    // pod-2..pod-5: 30 + 40 + 50 + 60.
    assert_eq!(
        dropped(&text, "__overflow__", "__overflow__", "__overflow__"),
        Some(180.0)
    );
    assert_eq!(folded_reports(&text), Some(4.0));
    assert_eq!(rejected(&text, "too_many_instances"), Some(0.0));

    send(&server, second_reports()).await;
    Wait::secs("11 reports", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(11.0))
        .await;
    let text = exposition(&registry);
    assert_overflow_after_second_round(&text);
    assert_eq!(folded_reports(&text), Some(8.0));
    assert_eq!(
        dropped(&text, "app", "pod-0", "orders-pod-0"),
        Some(1_000.0)
    );
    assert_eq!(
        count_samples(&text, "nats_delivery_app_dropped_messages_total"),
        3
    );
    assert_eq!(
        exact(&text, "nats_delivery_app_report_folded_instances", &[]),
        Some(4.0)
    );
    assert_eq!(rejected(&text, "too_many_instances"), Some(0.0));
    nats_test_server::reference::assert_documented(&text);
    assert_promtool_clean(&registry);
}

/// One kept instance, 16 folded (16 x 1), then reports of 5 more instances
/// are rejected; the folded instances go on being summed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_folded_instance_limit_reports_are_rejected() {
    let server = NatsServer::builder().start();
    let limits = ReportLimits {
        max_instances: 1,
        ..ReportLimits::default()
    };
    let (registry, reports) = exporter_with(&server, SUBJECT, LONG, limits).await;
    let sub = json!([{"subscription": "orders", "dropped_messages": 2}]);
    send(
        &server,
        (0..22).map(|i| report("app", &format!("pod-{i:02}"), 1, sub.clone())),
    )
    .await;
    Wait::secs("22 reports", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(22.0))
        .await;
    let text = exposition(&registry);
    assert_eq!((reports.instances(), reports.folded_instances()), (1, 16));
    assert_eq!(rejected(&text, "too_many_instances"), Some(5.0));
    assert_eq!(folded_reports(&text), Some(16.0));
    assert_eq!(
        dropped(&text, "__overflow__", "__overflow__", "__overflow__"),
        Some(32.0)
    );
    assert_eq!(
        exact(
            &text,
            "nats_delivery_app_report_folded_instances_limit",
            &[]
        ),
        Some(16.0)
    );

    // A folded instance still counts (+3); a rejected one still is not.
    let more = json!([{"subscription": "orders", "dropped_messages": 5}]);
    send(
        &server,
        [
            report("app", "pod-16", 2, more.clone()),
            report("app", "pod-17", 2, more),
        ],
    )
    .await;
    Wait::secs("24 reports", 20)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(&registry)) == Some(24.0))
        .await;
    let text = exposition(&registry);
    assert_eq!(rejected(&text, "too_many_instances"), Some(6.0));
    assert_eq!(folded_reports(&text), Some(17.0));
    assert_eq!(
        dropped(&text, "__overflow__", "__overflow__", "__overflow__"),
        Some(35.0)
    );
}

/// Folded instances are forgotten after the expiry time, by the timer, and
/// their `__overflow__` series end with them; an instance that reports
/// again later, with a slot free, is kept under its own labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folded_instances_expire() {
    let server = NatsServer::builder().start();
    let limits = ReportLimits {
        max_instances: 1,
        ..ReportLimits::default()
    };
    let (registry, reports) = exporter_with(&server, SUBJECT, Duration::from_secs(2), limits).await;
    let sub = json!([{"subscription": "orders", "dropped_messages": 4}]);
    send(
        &server,
        ["pod-0", "pod-1"].map(|i| report("app", i, 1, sub.clone())),
    )
    .await;
    Wait::secs("the reports", 20)
        .every(Duration::from_millis(10))
        .until(|| (reports.instances(), reports.folded_instances()) == (1, 1))
        .await;
    // Nobody scrapes or reports: only the timer can remove them.
    Wait::secs("the expiry", 20)
        .every(Duration::from_millis(10))
        .until(|| (reports.instances(), reports.folded_instances()) == (0, 0))
        .await;
    let text = exposition(&registry);
    assert_eq!(
        dropped(&text, "__overflow__", "__overflow__", "__overflow__"),
        None
    );
    send(&server, [report("app", "pod-1", 2, sub)]).await;
    Wait::secs("pod-1 kept", 20)
        .every(Duration::from_millis(10))
        .until(|| reports.instances() == 1)
        .await;
    let text = exposition(&registry);
    assert_eq!(dropped(&text, "app", "pod-1", "orders"), Some(4.0));
    assert_eq!(folded_reports(&text), Some(1.0));
}
