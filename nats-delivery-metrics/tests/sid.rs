//! The sid of an async-nats `Subscriber` is private; the crate reads it from
//! the `Debug` output. These tests fail loudly the day async-nats changes that
//! output: the sids read must be the ones the server lists for the subjects.

use nats_test_server::app as common;

use nats_delivery_metrics::ClientMetrics;
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

/// sid -> subject as the server lists them for connection `name`.
fn server_sids(server: &NatsServer, name: &str) -> Vec<(u64, String)> {
    let mut sids: Vec<(u64, String)> = common::server_subscriptions(server, name)
        .iter()
        .map(|s| {
            (
                s["sid"].as_str().unwrap().parse().unwrap(),
                s["subject"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    sids.sort();
    sids
}

#[tokio::test]
async fn sids_read_from_debug_output_are_the_servers_sids() {
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let metrics = ClientMetrics::new("sids", &mut registry);
    let client = metrics
        .connect(
            async_nats::ConnectOptions::new().name("sids"),
            server.client_url(),
        )
        .await
        .unwrap();
    // Skip a few sids so that a parser returning a constant cannot pass.
    let _skipped: Vec<_> =
        futures::future::join_all((0..3).map(|i| client.client().subscribe(format!("skip.{i}"))))
            .await;
    let plain = client.client().subscribe("plain.subject").await.unwrap();
    let instrumented = client.subscribe("instrumented.subject").await.unwrap();
    client.client().flush().await.unwrap();
    let _ = client.request("sids.sync", bytes::Bytes::new()).await;

    let debug = format!("{plain:?}");
    metrics
        .name_subscriber(&plain, "plain")
        .unwrap_or_else(|e| {
            panic!("async-nats changed its Subscriber Debug output ({debug}): {e}")
        });
    let instrumented_sid = instrumented
        .sid()
        .expect("async-nats changed its Subscriber Debug output");
    let listed = server_sids(&server, "sids");
    let sid_of = |subject: &str| listed.iter().find(|(_, s)| s == subject).unwrap().0;
    assert_eq!(instrumented_sid, sid_of("instrumented.subject"));
    assert_eq!(instrumented_sid, 5);
    // `name_subscriber` read the same sid the server has: its events now count
    // under "plain", which appears in the exposition with 0 events.
    assert_eq!(sid_of("plain.subject"), 4);
    assert!(debug.contains("sid: 4"), "{debug}");
    let totals = metrics.subscription_totals("plain").unwrap();
    assert_eq!(totals.slow_consumer_events, 0);
}
