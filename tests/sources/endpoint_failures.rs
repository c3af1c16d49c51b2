//! A monitoring endpoint that is down, hangs, or answers garbage: its source
//! is reported down within the timeout, its values are not shown, and every
//! other server and source is still served.
use crate::common;
use common::fake_endpoint::ClosedPort;

use std::time::{Duration, Instant};

use nats_delivery_exporter::Source;
use nats_test_server::sample::value;
use nats_test_server::NatsServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Failed polls per scrape of a broken endpoint: one per source.
const SOURCES: f64 = Source::ALL.len() as f64;

/// Accepts connections and never answers.
async fn hanging_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    format!("http://{addr}")
}

/// Answers every request with `status` and `body`.
async fn fixed_endpoint(status: &'static str, body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn broken_endpoints_are_down_and_the_rest_is_served() {
    let server = NatsServer::builder().jetstream().start();
    let closed = ClosedPort::new();
    let broken = Broken {
        hanging: hanging_endpoint().await,
        garbage: fixed_endpoint("200 OK", "<html>not json</html>").await,
        wrong_shape: fixed_endpoint("200 OK", "{\"slow_consumers\": \"many\"}").await,
        failing: fixed_endpoint("503 Service Unavailable", "").await,
        closed: closed.url(),
    };
    let urls = [
        server.monitor_url(),
        broken.hanging.clone(),
        broken.garbage.clone(),
        broken.wrong_shape.clone(),
        broken.failing.clone(),
        broken.closed.clone(),
    ];
    // Every source, also those off by default.
    let all_sources = Source::ALL.map(Source::as_str).join(",");
    // Long enough for the healthy server on a loaded machine; the hanging
    // endpoint is cut by it.
    let exporter = common::exporter(&urls, &["--timeout", "3s", "--sources", &all_sources]);

    let started = Instant::now();
    let text = common::scrape(&exporter).await;
    let took = started.elapsed();
    // Generous bound: a hang would never end; this only proves it is bounded.
    assert!(took < Duration::from_secs(20), "scrape took {took:?}");
    check_up_and_errors(&text, &server, &broken);
    check_only_the_healthy_values(&text, &server, &broken);

    // A second scrape counts a second failure: errors are counters.
    let text = common::scrape(&exporter).await;
    let n = value(
        &text,
        "nats_delivery_scrape_errors_total",
        &[("server", &authority(&broken.closed)), ("source", "varz")],
    );
    assert_eq!(n, Some(2.0));
}

/// The broken endpoints' URLs.
struct Broken {
    hanging: String,
    garbage: String,
    wrong_shape: String,
    failing: String,
    closed: String,
}

/// The `server` label of an endpoint the exporter polls by its URL.
fn authority(u: &str) -> String {
    u.trim_start_matches("http://").to_string()
}

/// Each source up on the healthy server, down on the broken endpoints, and
/// each failure counted by its kind.
fn check_up_and_errors(text: &str, server: &NatsServer, broken: &Broken) {
    let up = |server: &str, source: &str| {
        value(
            text,
            "nats_delivery_up",
            &[("server", server), ("source", source)],
        )
    };
    let errors = |server: &str, kind: &str| {
        nats_test_server::sample::samples(
            text,
            "nats_delivery_scrape_errors_total",
            &[("server", server), ("kind", kind)],
        )
        .iter()
        .map(|(_, v)| *v)
        .sum::<f64>()
    };
    let Broken {
        hanging,
        garbage,
        wrong_shape,
        failing,
        closed,
    } = broken;
    for source in Source::ALL.map(Source::as_str) {
        assert_eq!(up(&server.name, source), Some(1.0), "{source}");
        for bad in [hanging, garbage, failing, closed] {
            assert_eq!(up(&authority(bad), source), Some(0.0), "{bad} {source}");
        }
    }
    assert_eq!(errors(&authority(hanging), "timeout"), SOURCES);
    assert_eq!(errors(&authority(garbage), "parse"), SOURCES);
    // The wrong shape only breaks /varz, whose slow_consumers must be a number;
    // /connz, /jsz, /accstatz, /routez, /gatewayz and /healthz find none of their fields, and a missing field is not an error.
    assert_eq!(errors(&authority(wrong_shape), "parse"), 1.0);
    assert_eq!(up(&authority(wrong_shape), "varz"), Some(0.0));
    assert_eq!(up(&authority(wrong_shape), "connz"), Some(1.0));
    assert_eq!(up(&authority(wrong_shape), "accstatz"), Some(1.0));
    // /healthz answers 503 with its reasons, so that status is read: an
    // empty body is a parse failure there.
    assert_eq!(errors(&authority(failing), "http_status"), SOURCES - 1.0);
    assert_eq!(errors(&authority(failing), "parse"), 1.0);
    assert_eq!(errors(&authority(closed), "connect"), SOURCES);
}

/// Values of the healthy server are served; nothing from the broken ones.
fn check_only_the_healthy_values(text: &str, server: &NatsServer, broken: &Broken) {
    assert_eq!(
        value(
            text,
            "nats_delivery_server_slow_consumers_total",
            &[("server", &server.name)]
        ),
        Some(0.0)
    );
    assert_eq!(
        nats_test_server::sample::samples(text, "nats_delivery_server_slow_consumers_total", &[])
            .len(),
        1
    );
    assert_eq!(
        value(
            text,
            "nats_delivery_last_success_timestamp_seconds",
            &[("server", &authority(&broken.closed)), ("source", "varz")]
        ),
        None
    );
    nats_test_server::reference::assert_documented(text);
}

#[tokio::test]
async fn a_server_that_stops_is_down_and_its_values_vanish() {
    let server = NatsServer::builder().start();
    let url = server.monitor_url();
    let exporter = common::exporter(
        std::slice::from_ref(&url),
        &["--timeout", "10s", "--sources", "varz"],
    );
    let text = common::scrape(&exporter).await;
    assert_eq!(
        value(&text, "nats_delivery_up", &[("server", &server.name)]),
        Some(1.0)
    );
    let name = server.name.clone();
    drop(server);
    let text = common::scrape(&exporter).await;
    // The name learned earlier stays the label, so the series continues.
    assert_eq!(
        value(&text, "nats_delivery_up", &[("server", &name)]),
        Some(0.0)
    );
    assert_eq!(
        value(&text, "nats_delivery_server_connections", &[]),
        None,
        "no stale values"
    );
    assert!(value(
        &text,
        "nats_delivery_last_success_timestamp_seconds",
        &[("server", &name)]
    )
    .is_some());
}
