//! Monitoring endpoints that send what no nats-server sends: a huge
//! Content-Length, an endless or oversized body, a redirect. Each leaves its
//! source down with its own error kind; nothing is buffered beyond the limit
//! and the exporter keeps serving.
use crate::common;

use common::fake_endpoint::{self, Reply};
use nats_delivery_exporter::Source;
use nats_test_server::sample::{samples, value};
use nats_test_server::NatsServer;

/// Failed polls per scrape of a broken endpoint: one per source.
const SOURCES: f64 = Source::ALL.len() as f64;

/// Every source, for `--sources`: some are off by default.
fn all_sources() -> String {
    Source::ALL.map(Source::as_str).join(",")
}

fn error_count(text: &str, server: &str, kind: &str) -> f64 {
    samples(
        text,
        "nats_delivery_scrape_errors_total",
        &[("server", server), ("kind", kind)],
    )
    .iter()
    .map(|(_, v)| *v)
    .sum()
}

#[tokio::test]
async fn oversized_replies_are_too_large_and_redirects_are_not_followed() {
    let server = NatsServer::builder().jetstream().start();
    // Would make the process allocate 50 GB if the header were trusted.
    let lying = fake_endpoint::start(|_| Reply::LyingLength(50_000_000_000)).await;
    let endless = fake_endpoint::start(|_| Reply::Endless).await;
    let big = fake_endpoint::start(|_| Reply::Sized(600_000_000)).await;
    let target = server.monitor_url();
    let redirect =
        fake_endpoint::start(move |path| Reply::Redirect(format!("{target}{path}"))).await;
    let urls = [
        server.monitor_url(),
        lying.url.clone(),
        endless.url.clone(),
        big.url.clone(),
        redirect.url.clone(),
    ];
    let exporter = common::exporter(
        &urls,
        // The limits are under test, not the timeout: reading 8 MiB from
        // four endpoints on a loaded machine has taken more than 5 s.
        &[
            "--timeout",
            "60s",
            "--max-reply-size",
            "8MiB",
            "--sources",
            &all_sources(),
        ],
    );
    let text = common::scrape(&exporter).await;

    for source in Source::ALL.map(Source::as_str) {
        let up = |s: &str| {
            value(
                &text,
                "nats_delivery_up",
                &[("server", s), ("source", source)],
            )
        };
        assert_eq!(up(&server.name), Some(1.0), "{source}");
        for bad in [&lying, &endless, &big, &redirect] {
            assert_eq!(up(&bad.authority), Some(0.0), "{} {source}", bad.url);
        }
    }
    for bad in [&lying, &endless, &big] {
        assert_eq!(
            error_count(&text, &bad.authority, "too_large"),
            SOURCES,
            "{}",
            bad.url
        );
    }
    assert_eq!(error_count(&text, &redirect.authority, "redirect"), SOURCES);
    // The redirect's target was never asked for anything through it: only the
    // healthy server's own series carry its values.
    assert_eq!(
        samples(&text, "nats_delivery_server_slow_consumers_total", &[]).len(),
        1
    );
    nats_test_server::reference::assert_documented(&text);
}

#[tokio::test]
async fn a_jsz_stream_that_is_not_json_fails_before_the_reply_ends() {
    // Endless: read to the limit, this would be too_large; parsed as it
    // arrives, it is refused as soon as its first stream ends.
    let garbage = fake_endpoint::start(|_| {
        Reply::EndlessAfter(r#"{"account_details":[{"stream_detail":[{"name":nope}"#)
    })
    .await;
    let exporter = common::exporter(
        std::slice::from_ref(&garbage.url),
        &["--max-reply-size", "8MiB", "--sources", "jsz"],
    );
    let text = common::scrape(&exporter).await;
    assert_eq!(error_count(&text, &garbage.authority, "parse"), 1.0);
    assert_eq!(error_count(&text, &garbage.authority, "too_large"), 0.0);
}

#[tokio::test]
async fn the_default_limit_refuses_a_600_mb_reply() {
    let big = fake_endpoint::start(|_| Reply::Sized(600_000_000)).await;
    let exporter = common::exporter(
        std::slice::from_ref(&big.url),
        // Reading the 256 MiB the default allows takes seconds under load.
        &["--timeout", "60s", "--sources", "varz"],
    );
    let text = common::scrape(&exporter).await;
    assert_eq!(
        value(&text, "nats_delivery_up", &[("server", &big.authority)]),
        Some(0.0)
    );
    assert_eq!(error_count(&text, &big.authority, "too_large"), 1.0);
}

#[tokio::test]
async fn two_urls_on_one_host_and_port_keep_their_series_apart() {
    let both = fake_endpoint::start(|path| {
        if path.starts_with("/good/") {
            Reply::Fixed("200 OK", "{}".into())
        } else {
            Reply::Fixed("503 Service Unavailable", String::new())
        }
    })
    .await;
    let urls = [format!("{}/good", both.url), format!("{}/bad", both.url)];
    let exporter = common::exporter(&urls, &["--sources", "jsz"]);
    let text = common::scrape(&exporter).await;
    let up = samples(&text, "nats_delivery_up", &[]);
    assert_eq!(up.len(), 2, "{up:?}");
    let good = format!("{}/good", both.authority);
    let bad = format!("{}/bad", both.authority);
    assert_eq!(
        value(&text, "nats_delivery_up", &[("server", &good)]),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "nats_delivery_up", &[("server", &bad)]),
        Some(0.0)
    );
}

#[tokio::test]
async fn credentials_in_a_monitoring_url_never_reach_errors_or_pages() {
    let failing = fake_endpoint::start(|_| Reply::Fixed("200 OK", "not json".into())).await;
    let with_password = failing.url.replace("http://", "http://admin:s3cretMON@");
    let exporter = common::exporter(
        std::slice::from_ref(&with_password),
        &["--sources", &all_sources()],
    );
    let text = common::scrape(&exporter).await;
    assert_eq!(error_count(&text, &failing.authority, "parse"), SOURCES);
    assert!(!text.contains("s3cretMON"));
    assert!(!text.contains("admin"));
}

#[tokio::test]
async fn a_body_that_trickles_forever_times_out() {
    let slow = fake_endpoint::start(|_| Reply::Trickle).await;
    let exporter = common::exporter(
        std::slice::from_ref(&slow.url),
        &["--timeout", "1s", "--sources", &all_sources()],
    );
    let started = std::time::Instant::now();
    let text = common::scrape(&exporter).await;
    // Generous bound: without a whole-reply timeout the scrape would never end.
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(error_count(&text, &slow.authority, "timeout"), SOURCES);
    assert_eq!(
        samples(&text, "nats_delivery_up", &[("server", &slow.authority)])
            .iter()
            .map(|(_, v)| *v)
            .sum::<f64>(),
        0.0
    );
}
