//! Stream and consumer metadata keys named by `--jsz-metadata-labels`
//! (2.10+) copied as labels onto one `_info` series per stream and
//! consumer that holds one of them; none without the flag, none from a
//! server that keeps no metadata.
use crate::common;

use std::collections::HashMap;

use async_nats::jetstream::{self, consumer::pull, stream};
use nats_delivery_exporter::{name_metadata_labels, MAX_LABEL_VALUE_BYTES};
use nats_test_server::sample::{all, value};
use nats_test_server::NatsServer;

fn metadata(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    (pairs.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every sample of `family`, as (sorted labels, value).
fn family(text: &str, family: &str) -> Vec<(Vec<(String, String)>, f64)> {
    let samples = all(text).into_iter().filter(|s| s.name == family);
    let mut out: Vec<_> = samples
        .map(|mut s| {
            s.labels.sort();
            (s.labels, s.value)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<_> = (pairs.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn named_metadata_keys_become_labels_of_one_info_series() {
    let version = nats_test_server::version_under_test();
    let server = NatsServer::builder().version(&version).jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    let long = "a".repeat(200);
    let orders = js
        .create_stream(stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            metadata: metadata(&[("team", "pay"), ("Owner.Name", "ann"), ("other", "x")]),
            ..Default::default()
        })
        .await
        .unwrap();
    js.create_stream(stream::Config {
        name: "PLAIN".into(),
        subjects: vec!["plain.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    for (name, pairs) in [
        (
            "payments",
            vec![("team", "pay"), ("Owner.Name", long.as_str())],
        ),
        ("nightly", vec![("other", "x")]),
        ("bare", vec![]),
    ] {
        orders
            .create_consumer(pull::Config {
                durable_name: Some(name.into()),
                metadata: metadata(&pairs),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let flags = ["--sources", "varz,jsz"];
    let read = |text: &str| {
        let c = [
            ("account", "$G"),
            ("stream", "ORDERS"),
            ("consumer", "bare"),
        ];
        assert!(
            value(text, "nats_delivery_consumer_pending_messages", &c).is_some(),
            "{version}: consumers not read"
        );
        (
            family(text, "nats_delivery_stream_metadata_info"),
            family(text, "nats_delivery_consumer_metadata_info"),
        )
    };

    // No key named (the default): no series.
    let plain = common::exporter(&[server.monitor_url()], &flags);
    let (streams, consumers) = read(&common::scrape(&plain).await);
    assert!(streams.is_empty() && consumers.is_empty(), "{version}");
    drop(plain);

    // As the binary does with --jsz-metadata-labels team,Owner.Name.
    name_metadata_labels(&["team".into(), "Owner.Name".into()]).unwrap();
    let named = common::exporter(&[server.monitor_url()], &flags);
    let (streams, consumers) = read(&common::scrape(&named).await);
    // Servers before 2.10 keep no metadata: no series, not empty labels.
    if version.starts_with("2.9") || version == "debian" {
        assert!(streams.is_empty() && consumers.is_empty(), "{version}");
        return;
    }
    let stream = labels(&[
        ("account", "$G"),
        ("stream", "ORDERS"),
        ("metadata_team", "pay"),
        ("metadata_owner_name", "ann"),
    ]);
    assert_eq!(streams, vec![(stream, 1.0)], "{version}");
    let consumer = labels(&[
        ("account", "$G"),
        ("stream", "ORDERS"),
        ("consumer", "payments"),
        ("metadata_team", "pay"),
        ("metadata_owner_name", &long[..MAX_LABEL_VALUE_BYTES]),
    ]);
    assert_eq!(consumers, vec![(consumer, 1.0)], "{version}");
}
