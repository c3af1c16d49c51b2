//! A scrape that panics while the exposition's lock is held (a collector
//! of the registry panics as it is encoded) ends that scrape only, as a
//! failure: in process the scrape is `ScrapeAborted`, over HTTP the
//! response is broken off (its body never ends as a whole one does), so
//! that Prometheus records `up` 0 instead of a short text. The next scrape
//! is served in full.
use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::fake_endpoint::{self, Reply};
use nats_delivery_exporter::{Exporter, Format, ScrapeAborted};
use nats_test_server::sample::value;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// Panics on its first encode; later ones write `panicked_before 1`.
#[derive(Debug, Default)]
struct PanicsOnce {
    panicked: AtomicBool,
}

impl Collector for PanicsOnce {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        if !self.panicked.swap(true, Ordering::SeqCst) {
            panic!("a collector panics in the middle of a scrape");
        }
        let family = enc.encode_descriptor("panicked_before", "test", None, MetricType::Gauge)?;
        ConstGauge::new(1i64).encode(family)
    }
}

/// An exporter polling a fixed `/varz`, with a collector that panics once.
async fn exporter_that_panics_once() -> (Exporter, fake_endpoint::FakeEndpoint) {
    let varz = include_str!("../fixtures/2.15.1/varz.json");
    let endpoint = fake_endpoint::start(move |_| Reply::Fixed("200 OK", varz.into())).await;
    let mut builder =
        common::exporter_builder(std::slice::from_ref(&endpoint.url), &["--sources", "varz"]);
    builder
        .registry_mut()
        .register_collector(Box::new(PanicsOnce::default()));
    (builder.build(), endpoint)
}

/// A whole scrape's text: the server's `up` and the collector's sample.
fn assert_whole(text: &str) {
    let up = value(
        text,
        "nats_delivery_up",
        &[("server", "fixture"), ("source", "varz")],
    );
    assert_eq!(up, Some(1.0), "{text}");
    assert_eq!(value(text, "panicked_before", &[]), Some(1.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_after_a_panicking_one_is_served() {
    let (exporter, _endpoint) = exporter_that_panics_once().await;
    assert_eq!(exporter.scrape(Format::Classic).await, Err(ScrapeAborted));
    for _ in 0..2 {
        assert_whole(&common::scrape(&exporter).await);
    }
}

/// Over HTTP, as Prometheus scrapes (gzip asked for, or not): the
/// response of the panicking scrape fails to read, the next one reads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_scrape_breaks_its_http_response_off() {
    for gzip in [false, true] {
        let (exporter, _endpoint) = exporter_that_panics_once().await;
        let app = nats_delivery_exporter::router(Arc::new(exporter));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let client = reqwest::Client::new();
        let get = || {
            let mut req = client.get(&url);
            if gzip {
                req = req.header("accept-encoding", "gzip");
            }
            async move {
                let response = req.send().await?;
                assert_eq!(response.status(), 200);
                response.bytes().await
            }
        };
        let broken = get().await;
        assert!(broken.is_err(), "gzip {gzip}: a whole body: {broken:?}");
        for _ in 0..2 {
            let body = get().await.expect("a whole response");
            let text = if gzip {
                use std::io::Read;
                let mut text = String::new();
                flate2::read::GzDecoder::new(&body[..])
                    .read_to_string(&mut text)
                    .expect("whole gzip");
                text
            } else {
                String::from_utf8(body.to_vec()).unwrap()
            };
            assert_whole(&text);
        }
        server.abort();
    }
}
