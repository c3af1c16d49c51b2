//! A consumer with a known number of unacknowledged and redelivered messages:
//! the exporter's gauges equal the known numbers exactly, on every server
//! version the project supports (one per run of the suite).
use crate::common;

use async_nats::jetstream;
use nats_test_server::sample::value;
use nats_test_server::NatsServer;

async fn scenario(version: &str) {
    let server = NatsServer::builder().version(version).jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    common::scenarios::orders_with_redeliveries(&js).await;
    // Five more arrive and wait in the backlog.
    common::publish_acked(&js, (10..15).map(|i| format!("orders.{i}")), "x").await;
    // The last ack came before this, so before the scrape by at least as
    // long as the time from here to it.
    let acked_before = std::time::Instant::now();

    // Every family, the opt-in ones too.
    let flags = ["--sources", "varz,jsz", "--consumer-opt-in-metrics", "all"];
    let exporter = common::exporter(&[server.monitor_url()], &flags);
    let since_acked = acked_before.elapsed().as_secs_f64();
    let text = common::scrape(&exporter).await;
    let default = common::exporter(&[server.monitor_url()], &flags[..2]);
    let default_text = common::scrape(&default).await;
    let c = [
        ("account", "$G"),
        ("stream", "ORDERS"),
        ("consumer", "billing"),
    ];
    let v = |name: &str| value(&text, name, &c);
    assert_eq!(
        v("nats_delivery_consumer_ack_pending_messages"),
        Some(7.0),
        "{version}"
    );
    assert_eq!(
        v("nats_delivery_consumer_redelivered_messages"),
        Some(7.0),
        "{version}"
    );
    assert_eq!(
        v("nats_delivery_consumer_pending_messages"),
        Some(5.0),
        "{version}"
    );
    assert_eq!(
        v("nats_delivery_consumer_delivered_stream_sequence"),
        Some(10.0),
        "{version}"
    );
    assert_eq!(
        v("nats_delivery_consumer_ack_floor_stream_sequence"),
        Some(3.0),
        "{version}"
    );
    assert_eq!(
        v("nats_delivery_consumer_max_deliver"),
        Some(5.0),
        "{version}"
    );
    assert_eq!(
        v("nats_delivery_consumer_max_ack_pending"),
        Some(100.0),
        "{version}"
    );
    assert_eq!(
        v("nats_delivery_consumer_ack_wait_seconds"),
        Some(1.0),
        "{version}"
    );
    assert_eq!(
        v("nats_delivery_consumer_waiting_pulls"),
        Some(0.0),
        "{version}"
    );
    let since_delivery = v("nats_delivery_consumer_last_delivery_age_seconds").unwrap();
    let since_ack = v("nats_delivery_consumer_last_ack_age_seconds").unwrap();
    assert!(
        since_ack >= since_delivery,
        "{version}: acked before the redelivery"
    );
    // (The server's clock and ours are one machine's; a few ms allowed.)
    assert!(
        (since_acked - 0.05..60.0).contains(&since_ack),
        "{version}: last ack {since_ack} s ago, at least {since_acked} s by the test's clock"
    );
    assert_stream_gauges(&text);
    nats_test_server::reference::assert_documented(&text);
    // By default the opt-in families are left out, and the others are the same.
    assert_opt_in_left_out_by_default(&text, &default_text, version);
}

/// ORDERS: 15 messages, one consumer, and its limits.
fn assert_stream_gauges(text: &str) {
    let s = [("account", "$G"), ("stream", "ORDERS")];
    assert_eq!(value(text, "nats_delivery_stream_messages", &s), Some(15.0));
    assert_eq!(
        value(text, "nats_delivery_stream_last_sequence", &s),
        Some(15.0)
    );
    assert_eq!(
        value(text, "nats_delivery_stream_first_sequence", &s),
        Some(1.0)
    );
    assert_eq!(value(text, "nats_delivery_stream_consumers", &s), Some(1.0));
    assert_eq!(
        value(text, "nats_delivery_stream_max_messages", &s),
        Some(1000.0)
    );
    assert_eq!(
        value(text, "nats_delivery_stream_max_bytes", &s),
        Some(1048576.0)
    );
    assert_eq!(
        value(text, "nats_delivery_stream_max_age_seconds", &s),
        Some(3600.0)
    );
}

/// By default the opt-in families are left out, and the others are the same.
fn assert_opt_in_left_out_by_default(text: &str, default_text: &str, version: &str) {
    let c = [
        ("account", "$G"),
        ("stream", "ORDERS"),
        ("consumer", "billing"),
    ];
    let v = |name: &str| value(text, name, &c);
    for family in [
        "nats_delivery_consumer_ack_wait_seconds",
        "nats_delivery_consumer_last_delivery_age_seconds",
        "nats_delivery_consumer_last_ack_age_seconds",
        "nats_delivery_consumer_deliveries_total",
        "nats_delivery_consumer_max_deliver",
        "nats_delivery_consumer_ack_floor_stream_sequence",
    ] {
        assert!(v(family).is_some(), "{version}: {family}");
        assert_eq!(value(default_text, family, &c), None, "{version}: {family}");
    }
    for family in [
        "nats_delivery_consumer_ack_pending_messages",
        "nats_delivery_consumer_redelivered_messages",
    ] {
        assert_eq!(
            value(default_text, family, &c),
            v(family),
            "{version}: {family}"
        );
    }
}

/// Runs on the version under test (`scripts/test.sh` runs it on each).
#[tokio::test]
async fn consumer_gauges_are_exact() {
    scenario(&nats_test_server::version_under_test()).await;
}
