//! The `prometheus` crate backend (feature `prometheus`): a collector that
//! turns the families of one collection into the crate's `MetricFamily`s,
//! written out by its `TextEncoder`.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};

use super::families::{Kind, ALL};
use super::Collected;
use crate::state::Shared;

struct PrometheusCollector {
    shared: Arc<Shared>,
    descs: Vec<Desc>,
}

/// Registers the collector of `shared` in `registry`. Each family's
/// descriptor carries `client` as a constant label, so that metrics of two
/// connections can share a registry (the registry refuses two collectors
/// with the same descriptors).
pub(crate) fn register(
    shared: &Arc<Shared>,
    registry: &prometheus::Registry,
) -> prometheus::Result<()> {
    let descs = ALL
        .iter()
        .map(|f| {
            let variable = f.labels.iter().filter(|l| **l != "client");
            let constant = HashMap::from([("client".to_string(), shared.client.clone())]);
            Desc::new(
                f.exposed_name(),
                f.help.to_string(),
                variable.map(|l| l.to_string()).collect(),
                constant,
            )
        })
        .collect::<prometheus::Result<_>>()?;
    registry.register(Box::new(PrometheusCollector {
        shared: shared.clone(),
        descs,
    }))
}

impl Collector for PrometheusCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        super::collect(&self.shared)
            .iter()
            .filter(|c| !c.samples.is_empty())
            .map(family)
            .collect()
    }
}

fn family(collected: &Collected) -> MetricFamily {
    let f = collected.family;
    let mut out = MetricFamily::default();
    out.set_name(f.exposed_name());
    out.set_help(f.help.to_string());
    out.set_field_type(match f.kind {
        Kind::Counter => MetricType::COUNTER,
        Kind::Gauge | Kind::Ratio => MetricType::GAUGE,
    });
    let metrics = collected.samples.iter().map(|sample| {
        let labels = sample.label_pairs(f).map(|(name, value)| {
            let mut pair = proto::LabelPair::default();
            pair.set_name(name.to_string());
            pair.set_value(value.to_string());
            pair
        });
        let mut metric = proto::Metric::from_label(labels.collect());
        match f.kind {
            Kind::Counter => {
                let mut counter = proto::Counter::default();
                counter.set_value(sample.value.as_f64());
                metric.set_counter(counter);
            }
            Kind::Gauge | Kind::Ratio => {
                let mut gauge = proto::Gauge::default();
                gauge.set_value(sample.value.as_f64());
                metric.set_gauge(gauge);
            }
        }
        metric
    });
    out.set_metric(metrics.collect());
    out
}
