//! Monitoring over HTTPS: trusted through --monitor-tls-ca, refused (and
//! reported down, not silently) without it.
use crate::common;

use clap::Parser;
use nats_delivery_exporter::{Config, Exporter, Source};
use nats_test_server::sample::value;
use nats_test_server::NatsServer;

#[tokio::test]
async fn https_endpoints_with_and_without_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    nats_test_server::tls::make_certs(dir.path());
    let p = |f: &str| dir.path().join(f).display().to_string();
    let server = NatsServer::builder()
        .https(
            &dir.path().join("server.pem"),
            &dir.path().join("server.key"),
        )
        .start();
    assert!(server.monitor_url().starts_with("https://"));
    let url = [server.monitor_url()];

    // Every source, also those off by default.
    let all_sources = Source::ALL.map(Source::as_str).join(",");
    let trusted = common::exporter(
        &url,
        &["--monitor-tls-ca", &p("ca.pem"), "--sources", &all_sources],
    );
    let text = common::scrape(&trusted).await;
    for source in Source::ALL.map(Source::as_str) {
        assert_eq!(
            value(&text, "nats_delivery_up", &[("source", source)]),
            Some(1.0),
            "{source}"
        );
    }
    assert_eq!(
        value(&text, "nats_delivery_server_slow_consumers_total", &[]),
        Some(0.0)
    );

    let untrusted = common::exporter(&url, &[]);
    let text = common::scrape(&untrusted).await;
    assert_eq!(
        value(&text, "nats_delivery_up", &[("source", "varz")]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &text,
            "nats_delivery_scrape_errors_total",
            &[("source", "varz"), ("kind", "connect")]
        ),
        Some(1.0)
    );
}

#[test]
fn an_unreadable_ca_file_is_a_clear_error() {
    // Refused by the flag parser, naming the flag.
    let err = Config::try_parse_from(["x", "--monitor-tls-ca", "/nonexistent/ca.pem"]).unwrap_err();
    assert!(err.to_string().contains("--monitor-tls-ca"), "{err}");
    assert!(
        err.to_string()
            .contains("cannot read '/nonexistent/ca.pem'"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let err =
        Config::try_parse_from(["x", "--monitor-tls-ca", not_pem.to_str().unwrap()]).unwrap_err();
    assert!(err.to_string().contains("not a PEM file"), "{err}");
    // PEM, but no certificate in it.
    let key_only = dir.path().join("key.pem");
    std::fs::write(
        &key_only,
        "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let config =
        Config::try_parse_from(["x", "--monitor-tls-ca", key_only.to_str().unwrap()]).unwrap();
    let err = Exporter::new(config.scrape_settings()).unwrap_err();
    assert!(
        err.to_string().contains("holds no PEM certificate"),
        "{err}"
    );
}
