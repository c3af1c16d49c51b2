//! A scrape that panics while the exposition's lock is held (a collector
//! of the registry panics as it is encoded) ends that scrape only: the next
//! one is served in full.
use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::fake_endpoint::{self, Reply};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_after_a_panicking_one_is_served() {
    let varz = include_str!("../fixtures/2.15.1/varz.json");
    let endpoint = fake_endpoint::start(move |_| Reply::Fixed("200 OK", varz.into())).await;
    let mut builder =
        common::exporter_builder(std::slice::from_ref(&endpoint.url), &["--sources", "varz"]);
    builder
        .registry_mut()
        .register_collector(Box::new(PanicsOnce::default()));
    let exporter = builder.build();
    // The panic ends the first scrape's text before anything is sent.
    assert_eq!(common::scrape(&exporter).await, "");
    for _ in 0..2 {
        let text = common::scrape(&exporter).await;
        let up = value(
            &text,
            "nats_delivery_up",
            &[("server", "fixture"), ("source", "varz")],
        );
        assert_eq!(up, Some(1.0), "{text}");
        assert_eq!(value(&text, "panicked_before", &[]), Some(1.0), "{text}");
    }
}
