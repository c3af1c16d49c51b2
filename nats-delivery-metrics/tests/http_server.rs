//! The optional built-in `/metrics` endpoint (feature `http-server`).
#![cfg(feature = "http-server")]

use nats_test_server::app as common;
use nats_test_server::wait::Wait;

use std::sync::Arc;
use std::time::Duration;

use nats_delivery_metrics::ClientMetrics;
use prometheus_client::registry::Registry;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_registry_on_metrics() {
    let mut registry = Registry::default();
    let _metrics = ClientMetrics::new("served", &mut registry);
    let expected = common::exposition(&registry);
    // A free loopback port below the ephemeral range (never 4222/8222).
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], nats_test_server::free_port()));
    tokio::spawn(nats_delivery_metrics::serve(Arc::new(registry), addr));
    let url = format!("http://{addr}/metrics");
    let body = Wait::secs("the /metrics endpoint to answer", 10)
        .every(Duration::from_millis(20))
        .until_async(async || {
            let url = url.clone();
            tokio::task::spawn_blocking(move || {
                std::panic::catch_unwind(|| nats_test_server::http_get(&url)).ok()
            })
            .await
            .unwrap()
        })
        .await;
    assert_eq!(body, expected);

    // A client that connects and sends nothing is cut after READ_TIMEOUT
    // instead of holding its task forever; the endpoint keeps serving.
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(
        nats_delivery_metrics::READ_TIMEOUT * 3,
        silent.read(&mut buf),
    )
    .await
    .expect("a silent client must be disconnected");
    assert_eq!(read.unwrap(), 0, "closed without an answer");
    assert!(started.elapsed() >= nats_delivery_metrics::READ_TIMEOUT);
    let again = tokio::task::spawn_blocking(move || nats_test_server::http_get(&url))
        .await
        .unwrap();
    assert_eq!(again, expected);
    assert!(body.contains(
        "nats_delivery_client_connection_events_total{client=\"served\",event=\"connected\"} 0\n"
    ));
    nats_test_server::reference::assert_documented(&body);
}
