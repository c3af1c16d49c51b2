//! Each backend's own exposition, read back into one shape: every series
//! (the name a query uses, its labels sorted) with its value, and every
//! family's help text. Used by `backends.rs` and the storms of `storm.rs`.
// Each of the two test binaries uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use nats_delivery_metrics::{ClientMetrics, MetricsFacade};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

/// `(name as queried, sorted (label, value) pairs)`.
pub type Series = (String, Vec<(String, String)>);

/// What one read of a backend shows.
#[derive(Debug, Default, PartialEq)]
pub struct Exposed {
    pub values: BTreeMap<Series, f64>,
    /// Help text by name as queried.
    pub help: BTreeMap<String, String>,
    /// The Prometheus text, for the backends that write one.
    pub text: Option<String>,
}

impl Exposed {
    /// The value of `name{labels}` (labels in any order).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        labels.sort();
        self.values.get(&(name.to_string(), labels)).copied()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    PrometheusClient,
    Prometheus,
    Metrics,
    OpenTelemetry,
}

impl Backend {
    pub const ALL: [Backend; 4] = [
        Backend::PrometheusClient,
        Backend::Prometheus,
        Backend::Metrics,
        Backend::OpenTelemetry,
    ];

    /// Exports `metrics` through this backend.
    pub fn attach(self, metrics: &ClientMetrics) -> Attached {
        match self {
            Backend::PrometheusClient => {
                let mut registry = prometheus_client::registry::Registry::default();
                metrics.register(&mut registry);
                Attached::PrometheusClient(registry)
            }
            Backend::Prometheus => {
                let registry = prometheus::Registry::new();
                metrics.register_prometheus(&registry).unwrap();
                Attached::Prometheus(registry)
            }
            Backend::Metrics => {
                let recorder = PrometheusBuilder::new().build_recorder();
                let handle = recorder.handle();
                Attached::Metrics(Box::new((recorder, handle, metrics.metrics_facade())))
            }
            Backend::OpenTelemetry => {
                let exporter = InMemoryMetricExporter::default();
                let provider = SdkMeterProvider::builder()
                    .with_reader(PeriodicReader::builder(exporter.clone()).build())
                    .build();
                metrics.register_opentelemetry(&provider.meter("nats-delivery-metrics"));
                Attached::OpenTelemetry(provider, exporter)
            }
        }
    }
}

/// A backend with the metrics attached, as an application holds it.
pub enum Attached {
    PrometheusClient(prometheus_client::registry::Registry),
    Prometheus(prometheus::Registry),
    Metrics(Box<(PrometheusRecorder, PrometheusHandle, MetricsFacade)>),
    OpenTelemetry(SdkMeterProvider, InMemoryMetricExporter),
}

impl Attached {
    /// Reads the backend's own exposition now.
    pub fn read(&self) -> Exposed {
        let text = match self {
            Attached::PrometheusClient(registry) => nats_test_server::app::exposition(registry),
            Attached::Prometheus(registry) => {
                let mut out = String::new();
                prometheus::TextEncoder::new()
                    .encode_utf8(&registry.gather(), &mut out)
                    .unwrap();
                out
            }
            Attached::Metrics(parts) => {
                let (recorder, handle, facade) = &**parts;
                metrics::with_local_recorder(recorder, || facade.update());
                handle.render()
            }
            Attached::OpenTelemetry(provider, exporter) => {
                provider.force_flush().unwrap();
                let exported = exporter.get_finished_metrics().unwrap();
                exporter.reset();
                return from_opentelemetry(exported.last().expect("one collection"));
            }
        };
        from_text(text)
    }
}

/// Series and help out of Prometheus text (classic or OpenMetrics).
fn from_text(text: String) -> Exposed {
    let mut exposed = Exposed::default();
    let mut counters = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            exposed.help.insert(name.to_string(), help.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.push(name.to_string());
            }
        }
    }
    for sample in nats_test_server::sample::all(&text) {
        let mut labels = sample.labels;
        labels.sort();
        let series = format!("{}{labels:?}", sample.name);
        let fresh = exposed.values.insert((sample.name, labels), sample.value);
        assert!(fresh.is_none(), "{series} twice");
    }
    // prometheus-client names a counter's family without `_total`.
    for name in counters.iter().filter(|n| !n.ends_with("_total")) {
        if let Some(help) = exposed.help.remove(name) {
            exposed.help.insert(format!("{name}_total"), help);
        }
    }
    exposed.text = Some(text);
    exposed
}

/// One row of METRICS.md's "OpenTelemetry names": the Prometheus family
/// (as a query names it), the unit and the attributes the instrument adds.
pub struct OtelName {
    pub family: String,
    pub unit: String,
    pub added: Vec<(String, String)>,
}

/// METRICS.md's "OpenTelemetry names" table, by instrument name.
pub fn otel_names() -> BTreeMap<String, OtelName> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../METRICS.md");
    let text = std::fs::read_to_string(path).expect("METRICS.md");
    let tick = |s: &str| s.trim().trim_matches('`').to_string();
    let mut names = BTreeMap::new();
    for line in text.lines() {
        if !(line.starts_with("| `nats.") || line.starts_with("| `messaging.")) {
            continue;
        }
        let cols: Vec<&str> = line.trim_matches('|').split('|').collect();
        let added = cols[3]
            .split(',')
            .map(|a| {
                let (k, v) = a.trim().trim_matches('`').split_once('=').unwrap();
                (k.to_string(), v.trim_matches('"').to_string())
            })
            .collect();
        let row = OtelName {
            family: tick(cols[1]),
            unit: tick(cols[2]),
            added,
        };
        assert!(names.insert(tick(cols[0]), row).is_none(), "{line}");
    }
    names
}

/// The last collection of the OpenTelemetry reader, each instrument named
/// by its Prometheus family through METRICS.md's "OpenTelemetry names"
/// (which must list it with its unit), without the attributes that table
/// says it adds (which it must carry).
pub fn from_opentelemetry(collection: &ResourceMetrics) -> Exposed {
    let names = otel_names();
    let mut exposed = Exposed::default();
    for metric in collection.scope_metrics().flat_map(|s| s.metrics()) {
        let row = names.get(metric.name()).unwrap_or_else(|| {
            panic!(
                "{} is not in METRICS.md's OpenTelemetry names",
                metric.name()
            )
        });
        assert_eq!(metric.unit(), row.unit, "{}", metric.name());
        let mut points: Vec<(Vec<(String, String)>, f64)> = Vec::new();
        let mut add = |attributes: Vec<&opentelemetry::KeyValue>, value: f64| {
            let mut labels: Vec<(String, String)> = attributes
                .iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect();
            for added in &row.added {
                let at = labels.iter().position(|l| l == added);
                let at = at.unwrap_or_else(|| panic!("{}: no {added:?}", metric.name()));
                labels.remove(at);
            }
            labels.sort();
            points.push((labels, value));
        };
        let name = match metric.data() {
            AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                assert!(sum.is_monotonic(), "{} is a counter", metric.name());
                for p in sum.data_points() {
                    add(p.attributes().collect(), p.value() as f64);
                }
                row.family.clone()
            }
            AggregatedMetrics::U64(MetricData::Gauge(gauge)) => {
                for p in gauge.data_points() {
                    add(p.attributes().collect(), p.value() as f64);
                }
                row.family.clone()
            }
            AggregatedMetrics::F64(MetricData::Gauge(gauge)) => {
                for p in gauge.data_points() {
                    add(p.attributes().collect(), p.value());
                }
                row.family.clone()
            }
            other => panic!("{}: unexpected data {other:?}", metric.name()),
        };
        if points.is_empty() {
            continue;
        }
        exposed
            .help
            .insert(name.clone(), metric.description().to_string());
        for (labels, value) in points {
            exposed.values.insert((name.clone(), labels), value);
        }
    }
    exposed
}
