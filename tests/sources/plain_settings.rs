//! The exporter built from plain settings, without flags: a program that
//! links the exporter in writes its `ScrapeSettings` and gets what the same
//! flags give.
use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use nats_delivery_exporter::{Exporter, ScrapeSettings, Source, SourceSettings};
use nats_test_server::sample::value;
use nats_test_server::NatsServer;

/// The flags' defaults, written out, with only `/varz` and `/jsz` polled
/// and consumer status off (`--sources varz,jsz --consumer-status-window 0s`).
fn settings(monitor_url: &str) -> ScrapeSettings {
    ScrapeSettings {
        monitor_urls: vec![monitor_url.parse().unwrap()],
        monitor_tls_ca: None,
        timeout: Duration::from_secs(5),
        max_reply_size: 256 << 20,
        max_kept_size: 88 << 20,
        reuse_poll_for: Duration::ZERO,
        sources: SourceSettings {
            enabled: vec![Source::Varz, Source::Jsz],
            connz_top: 10,
            max_client_names: 1000,
            jsz_page_size: 1024,
            jsz_filter: Default::default(),
            jsz_config_interval: Duration::from_secs(300),
            jsz_removal_check: None,
            jsz_poll_timeout: None,
            jsz_config_timeout: Duration::from_secs(60),
            jsz_fill_span: std::time::Duration::ZERO,
        },
        consumer_status_window: Duration::ZERO,
        consumer_timestamp_reads: 50,
        consumer_series: Default::default(),
        keep_ephemeral_consumers: false,
        max_jetstream_series: None,
    }
}

/// Every series of a scrape, by name and labels, without its value.
fn series(text: &str) -> BTreeSet<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series))
        .collect()
}

#[tokio::test]
async fn an_exporter_from_plain_settings_reads_a_real_server_as_the_flags_do() {
    let server = NatsServer::builder().name("plain").jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    let orders = js
        .create_stream(stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    orders
        .create_consumer(pull::Config {
            durable_name: Some("billing".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    common::publish_acked(&js, (0..3).map(|i| format!("orders.{i}")), "m").await;

    let plain = Exporter::new(settings(&server.monitor_url())).expect("exporter");
    let text = common::scrape(&plain).await;
    for source in ["varz", "jsz"] {
        let up = [("server", "plain"), ("source", source)];
        assert_eq!(value(&text, "nats_delivery_up", &up), Some(1.0), "{text}");
    }
    let connz = [("source", "connz")];
    assert_eq!(value(&text, "nats_delivery_up", &connz), None, "{text}");
    let billing = [("stream", "ORDERS"), ("consumer", "billing")];
    let pending = value(&text, "nats_delivery_consumer_pending_messages", &billing);
    assert_eq!(pending, Some(3.0), "{text}");

    let flags = ["--sources", "varz,jsz", "--consumer-status-window", "0s"];
    let from_flags = common::exporter(&[server.monitor_url()], &flags);
    let flags_text = common::scrape(&from_flags).await;
    let pending = value(
        &flags_text,
        "nats_delivery_consumer_pending_messages",
        &billing,
    );
    assert_eq!(pending, Some(3.0), "{flags_text}");
    assert_eq!(series(&text), series(&flags_text));
}
