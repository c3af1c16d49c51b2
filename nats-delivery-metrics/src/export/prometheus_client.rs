//! The prometheus-client backend (feature `prometheus-client`, the
//! default): a collector that encodes the families of one collection.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::families::Kind;
use super::{Collected, Value};
use crate::state::Shared;

/// Collector registered by `ClientMetrics::new` and `ClientMetrics::register`.
#[derive(Debug)]
pub(crate) struct ClientCollector(pub(crate) Arc<Shared>);

impl Collector for ClientCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        for collected in super::collect(&self.0) {
            encode_family(&mut encoder, &collected)?;
        }
        Ok(())
    }
}

/// Encodes one family; a family without samples is left out.
fn encode_family(encoder: &mut DescriptorEncoder, collected: &Collected) -> fmt::Result {
    let Some(first) = collected.samples.first() else {
        return Ok(());
    };
    let family = collected.family;
    let kind = metric(family.kind, first.value).metric_type();
    let mut metric_encoder = encoder.encode_descriptor(family.name, family.help, None, kind)?;
    for sample in &collected.samples {
        let labels: Vec<_> = sample.label_pairs(family).collect();
        let series = metric_encoder.encode_family(&labels)?;
        metric(family.kind, sample.value).encode(series)?;
    }
    Ok(())
}

/// The constant metric of one sample.
fn metric(kind: Kind, value: Value) -> Box<dyn EncodeMetric> {
    match (kind, value) {
        (Kind::Counter, Value::Count(n)) => Box::new(ConstCounter::new(n)),
        (Kind::Counter, Value::Ratio(r)) => Box::new(ConstCounter::new(r)),
        (_, Value::Count(n)) => Box::new(ConstGauge::new(n)),
        (_, Value::Ratio(r)) => Box::new(ConstGauge::new(r)),
    }
}
