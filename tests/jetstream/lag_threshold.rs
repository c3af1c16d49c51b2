//! A consumer's own delivery-lag threshold, from its metadata (2.10+): the
//! exporter writes the whole seconds its key holds, and nothing for a
//! consumer without the key or with a value that is not whole seconds.
use crate::common;

use std::collections::HashMap;

use async_nats::jetstream::{self, consumer::pull, stream};
use nats_delivery_exporter::LAG_THRESHOLD_KEY;
use nats_test_server::sample::value;
use nats_test_server::NatsServer;

#[tokio::test]
async fn a_consumers_metadata_sets_its_lag_threshold() {
    let version = nats_test_server::version_under_test();
    let server = NatsServer::builder().version(&version).jetstream().start();
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
    for (name, threshold) in [
        ("payments", Some("60")),
        ("nightly", Some("5m")),
        ("plain", None),
    ] {
        let mut metadata = HashMap::from([("team".to_string(), "pay".to_string())]);
        metadata.extend(threshold.map(|t| (LAG_THRESHOLD_KEY.to_string(), t.to_string())));
        orders
            .create_consumer(pull::Config {
                durable_name: Some(name.into()),
                metadata,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let exporter = common::exporter(&[server.monitor_url()], &["--sources", "varz,jsz"]);
    let text = common::scrape(&exporter).await;
    let threshold = |consumer: &str| {
        let c = [
            ("account", "$G"),
            ("stream", "ORDERS"),
            ("consumer", consumer),
        ];
        assert!(
            value(&text, "nats_delivery_consumer_pending_messages", &c).is_some(),
            "{version}: {consumer} not read"
        );
        value(&text, "nats_delivery_consumer_lag_threshold_seconds", &c)
    };
    // Servers before 2.10 keep no metadata: nothing to read there.
    let metadata_kept = !version.starts_with("2.9") && version != "debian";
    let payments = if metadata_kept { Some(60.0) } else { None };
    assert_eq!(threshold("payments"), payments, "{version}");
    assert_eq!(
        threshold("nightly"),
        None,
        "{version}: 5m is not whole seconds"
    );
    assert_eq!(threshold("plain"), None, "{version}");
}
