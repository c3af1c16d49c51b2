//! What one application could do to another's numbers before reports were
//! bound to their sender, tried against a real server: each forgery is
//! refused, counted by reason, and changes nothing of the other client's
//! series.

use std::time::Duration;

use bytes::Bytes;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::json;

use crate::client_reports_support::*;
use crate::common::{exposition, sync_with_server};

const LONG: Duration = Duration::from_secs(600);

fn drops(client: &str, instance: &str, sequence: u64, dropped: u64) -> Bytes {
    report(
        client,
        instance,
        sequence,
        json!([{"subscription": "orders", "dropped_messages": dropped}]),
    )
}

/// Publishes each (subject, body) and waits until the exporter received
/// `total` reports in all.
async fn publish(
    server: &NatsServer,
    registry: &prometheus_client::registry::Registry,
    sent: impl IntoIterator<Item = (String, Bytes)>,
    total: f64,
) {
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    for (subject, body) in sent {
        publisher.publish(subject, body).await.unwrap();
    }
    sync_with_server(&publisher).await;
    Wait::secs("the reports", 60)
        .every(Duration::from_millis(10))
        .until(|| received(&exposition(registry)) == Some(total))
        .await;
}

/// `orders` writes `client="billing"`: with a lower sequence (which used to
/// take billing for restarted and add its totals again: 40 became
/// 1,000,040), and with totals of 2^64-1 (which pinned billing's counter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_name_and_impossible_totals_are_refused_and_counted() {
    let server = NatsServer::builder().start();
    let (registry, _) = exporter(&server, SUBJECT, LONG).await;
    let of = |client: &str| format!("{SUBJECT}.{client}");
    publish(
        &server,
        &registry,
        [(of("billing"), drops("billing", "pod-1", 5, 40))],
        1.0,
    )
    .await;
    let forged = [
        (of("orders"), drops("billing", "pod-1", 1, 1_000_000)),
        (SUBJECT.to_string(), drops("billing", "pod-1", 1, 1_000_000)),
        (of("orders"), drops("billing", "pod-1", 6, u64::MAX)),
        (of("billing"), drops("billing", "pod-1", 6, u64::MAX)),
        (of("billing"), drops("billing", "pod-1", 6, 1 << 50)),
        // 2^40 more since billing's report: 2^32 a second would take 256 s.
        (of("billing"), drops("billing", "pod-1", 6, 40 + (1 << 40))),
    ];
    publish(&server, &registry, forged, 7.0).await;
    let text = exposition(&registry);
    assert_eq!(
        dropped(&text, "billing", "pod-1", "orders"),
        Some(40.0),
        "{text}"
    );
    assert_eq!(rejected(&text, "subject"), Some(3.0));
    assert_eq!(rejected(&text, "implausible_value"), Some(2.0));
    assert_eq!(rejected(&text, "implausible_jump"), Some(1.0));
    let restarts = nats_test_server::sample::exact(
        &text,
        "nats_delivery_app_instance_restarts_total",
        &[("client", "billing"), ("instance", "pod-1")],
    );
    assert_eq!(restarts, Some(0.0));
    // billing's own next report counts as before.
    publish(
        &server,
        &registry,
        [(of("billing"), drops("billing", "pod-1", 7, 90))],
        8.0,
    )
    .await;
    let text = exposition(&registry);
    assert_eq!(dropped(&text, "billing", "pod-1", "orders"), Some(90.0));
}

/// `orders` makes up 4,500 instances of itself (which used to fill every
/// kept and folded slot, so that a new application's reports were
/// refused): it keeps 32, the rest are refused and counted, and a new
/// application still gets its own series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_instances_take_only_their_own_clients_slots() {
    let server = NatsServer::builder().start();
    let (registry, reports) = exporter(&server, SUBJECT, LONG).await;
    let made_up = (0..4_500).map(|i| {
        let body = drops("orders", &format!("fake-{i}"), 1, 1);
        (format!("{SUBJECT}.orders"), body)
    });
    publish(&server, &registry, made_up, 4_500.0).await;
    let shipping = drops("shipping", "pod-1", 1, 500);
    publish(
        &server,
        &registry,
        [(format!("{SUBJECT}.shipping"), shipping)],
        4_501.0,
    )
    .await;
    let text = exposition(&registry);
    assert_eq!(rejected(&text, "too_many_client_instances"), Some(4_468.0));
    assert_eq!(rejected(&text, "too_many_instances"), Some(0.0));
    assert_eq!((reports.instances(), reports.folded_instances()), (33, 0));
    assert_eq!(dropped(&text, "shipping", "pod-1", "orders"), Some(500.0));
}

/// 100 applications of 2 instances, each reporting 32 subscription and 32
/// consumer names: 200 kept instances would make some 88,000 series (256
/// made 108,000 and 53 MB a scrape before, enough to trip a Prometheus
/// `sample_limit`). The kept instances' series stay within 25,000; the names
/// and instances past it are summed under `__overflow__` and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_carries_at_most_the_series_cap() {
    let server = NatsServer::builder().start();
    let (registry, reports) = exporter(&server, SUBJECT, LONG).await;
    let subs: Vec<_> = (0..32)
        .map(|s| {
            json!({"subscription": format!("s{s}"), "delivered_messages": 9,
                "dropped_messages": 1, "dropped_bytes": 64, "slow_consumer_events": 1,
                "pending_messages": 1, "pending_bytes": 64, "pending_messages_high_water": 2})
        })
        .collect();
    let consumers: Vec<_> = (0..32)
        .map(|c| {
            json!({"stream": "S", "consumer": format!("c{c}"), "received_messages": 3,
                "redelivered_messages": 1,
                "acknowledgements": {"ack": 1, "nak": 1, "term": 1, "in_progress": 1}})
        })
        .collect();
    let bodies = (0..200).map(|i| {
        let client = format!("app-{}", i / 2);
        let body = json!({"version": 1, "client": client, "instance": format!("pod-{i}"),
            "sequence": 1, "subscriptions": subs, "jetstream_consumers": consumers});
        let body = Bytes::from(serde_json::to_vec(&body).unwrap());
        (format!("{SUBJECT}.{client}"), body)
    });
    publish(&server, &registry, bodies, 200.0).await;
    let text = exposition(&registry);
    let app_samples = text
        .lines()
        .filter(|l| l.starts_with("nats_delivery_app_"))
        .count();
    // The kept instances' 25,000, the one __overflow__ instance (at most
    // 24 + 33 x 7 + 33 x 6) and the exporter's own report counters.
    assert!(app_samples <= 25_000 + 500, "{app_samples} samples");
    assert!(app_samples > 20_000, "{app_samples} samples");
    let folded_names = folded(&text, "subscription").unwrap() + folded(&text, "consumer").unwrap();
    let folded_reports =
        nats_test_server::sample::exact(&text, "nats_delivery_app_reports_folded_total", &[])
            .unwrap();
    assert!(folded_names + folded_reports > 0.0, "nothing was folded");
    assert_eq!(
        reports.instances() + reports.folded_instances(),
        200,
        "every instance counted, kept or folded"
    );
    // What was folded still adds up: every instance's 32 drops are there.
    let dropped: f64 =
        nats_test_server::sample::samples(&text, "nats_delivery_app_dropped_messages_total", &[])
            .iter()
            .map(|(_, v)| v)
            .sum();
    assert_eq!(dropped, 200.0 * 32.0);
}
